"""The OPT-style decoder: dense and Tiled-CSL linear layers compute the same model."""

import pytest
import torch

from labkit.spmm.decoder import Decoder, DecoderConfig, random_weights, tokens_per_second


@pytest.fixture(scope="module")
def models():
    cfg = DecoderConfig(d_model=64, n_heads=4, ffn_dim=256, n_layers=2, vocab=97, max_len=32)
    w = random_weights(cfg, 0.8, seed=1)
    return Decoder(w, linear="dense"), Decoder(w, linear="sparse"), w


def _logits(model, steps: int = 3):
    """Logits after `steps` decode steps of the same 3 tokens, from a fresh cache."""
    tok = torch.tensor([5, 17, 3])
    with torch.inference_mode():
        cache = model.new_cache(3)
        for t in range(steps):
            out = model.step(tok, cache, t)
    return out


def test_same_logits(models):
    dense, sparse, _ = models
    ld, ls = _logits(dense), _logits(sparse)
    # dense runs its linears in bf16 (activations and outputs rounded); sparse accumulates in fp32
    assert torch.allclose(ld, ls, atol=0.05 * ld.abs().max().item())


def test_fp32_dense_decoder_computes_the_same_model(models):
    dense, sparse, w = models
    fp32 = Decoder(w, linear="dense", dense_call="linear", dense_dtype=torch.float32)
    assert fp32.linear_bytes == 2 * dense.linear_bytes
    l32, ls = _logits(fp32), _logits(sparse)
    # the sparse model's bf16 values are the weights rounded; fp32 keeps them whole
    assert torch.allclose(l32, ls, atol=0.05 * l32.abs().max().item())
    with pytest.raises(ValueError, match="dense_dtype=torch.float32 .*linear='dense'"):
        Decoder(w, linear="sparse", dense_dtype=torch.float32)
    with pytest.raises(ValueError, match="dense_dtype=torch.float16"):
        Decoder(w, linear="dense", dense_dtype=torch.float16)


def test_generate_shapes_and_throughput(models):
    dense, sparse, w = models
    prompt = torch.tensor([[1, 2], [3, 4]])
    out = sparse.generate(prompt, 5)
    assert out.shape == (2, 7) and torch.equal(out[:, :2], prompt)
    assert int(out.max()) < 97
    assert tokens_per_second(sparse, 2, 3) > 0
    assert sparse.linear_bytes < 0.7 * dense.linear_bytes   # 64-wide rows: padding to 16 words shows
    assert all(float((layer["fc1"] == 0).float().mean()) > 0.75 for layer in w["layers"])


def test_bad_generate_input(models):
    _, sparse, _ = models
    with pytest.raises(ValueError, match="new_tokens=40"):
        sparse.generate(torch.tensor([[1]]), 40)
    with pytest.raises(ValueError, match="prompt="):
        sparse.generate(torch.tensor([1, 2]), 2)
    with pytest.raises(ValueError, match="linear='gpu'"):
        Decoder(random_weights(DecoderConfig(d_model=8, n_heads=2, ffn_dim=8, n_layers=1), 0.5), linear="gpu")


@pytest.mark.parametrize("prompt, match", [
    (torch.tensor([[-1]]), r"prompt\[0, 0\]=-1 is not accepted; expected a token id in \[0, 97\)"),
    (torch.tensor([[3, 4], [5, 97]]), r"prompt\[1, 1\]=97 .*\[0, 97\)"),
    (torch.tensor([[1.0, 2.0]]), r"prompt.dtype=torch.float32 .*integer dtype"),
    (torch.tensor([[True]]), r"prompt.dtype=torch.bool"),
])
def test_prompt_token_ids_are_checked(models, prompt, match):
    _, sparse, _ = models
    # -1 used to wrap silently to the last vocabulary row; 97 and floats failed inside torch.
    with pytest.raises(ValueError, match=match):
        sparse.generate(prompt, 2)
    assert sparse.generate(torch.tensor([[0, 96]], dtype=torch.int32), 1).shape == (1, 3)


def test_random_weights_rejects_a_negative_seed():
    with pytest.raises(ValueError, match=r"seed=-1 is not accepted; expected an integer in \[0, 2\*\*64\)"):
        random_weights(DecoderConfig(d_model=8, n_heads=2, ffn_dim=8, n_layers=1), 0.5, seed=-1)
