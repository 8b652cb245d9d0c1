"""The automatic cut: find a program's stateless part and split the program there.

GoldMiner's observation is that input pre-processing is stateless: the Dataset, the collate
function, and often the first operators of the model (type casts, layout changes,
normalisation) read no parameters or buffers and have no side effects. Those can run anywhere,
on any number of data workers. :func:`extract` checks the Dataset side by behaviour (it must be
picklable, must not mutate itself, must return the same sample twice) and the model side by
tracing it with ``torch.fx`` and keeping the longest prefix of pure nodes that depend only on
the inputs. :func:`check_equivalence` then runs both programs on the same keys and compares
batches and losses; anything unsafe raises :class:`ExtractionError` saying why and where.
"""

from __future__ import annotations

import copy
import operator
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import fx, nn

from labkit.core.errors import LabkitError, bad_value, check_range
from labkit.dataworkers.workloads import Program


class ExtractionError(LabkitError):
    """The program cannot be cut safely; the message says why and where."""


# Operators that draw from the global RNG or write to something: never moved.
_RANDOM_FUNCS = {torch.rand, torch.randn, torch.randint, torch.randperm, torch.rand_like, torch.randn_like,
                 torch.randint_like, torch.bernoulli, torch.multinomial, torch.normal, torch.poisson,
                 nn.functional.dropout, nn.functional.dropout1d, nn.functional.dropout2d,
                 nn.functional.dropout3d, nn.functional.alpha_dropout, nn.functional.feature_alpha_dropout,
                 nn.functional.gumbel_softmax, nn.functional.rrelu, torch.manual_seed, torch.seed}
_SIDE_EFFECT_FUNCS = {print, setattr, operator.setitem, torch._assert}
_RANDOM_METHODS = {"bernoulli", "bernoulli_", "normal_", "uniform_", "random_", "exponential_",
                   "geometric_", "cauchy_", "log_normal_"}
_RANDOM_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout,
                   nn.FeatureAlphaDropout, nn.RReLU)


def _name(target: Any) -> str:
    return getattr(target, "__name__", None) or str(target)


def node_verdict(node: fx.Node, gm: fx.GraphModule, params: set[str], buffers: set[str]) -> str:
    """Return '' if `node` itself is stateless, else the reason it is not (ignoring its inputs)."""
    if node.op == "placeholder":
        return ""
    if node.op == "output":
        return "the program's output"
    if node.op == "get_attr":
        if node.target in params:
            return f"reads parameter {node.target!r}"
        if node.target in buffers:
            return f"reads buffer {node.target!r}"
        return ""
    if node.op == "call_function":
        if node.target in _RANDOM_FUNCS:
            return f"{_name(node.target)} draws from the global RNG"
        if node.target in _SIDE_EFFECT_FUNCS:
            return f"{_name(node.target)} has side effects"
        if _name(node.target).endswith("_") and not _name(node.target).endswith("__"):
            return f"{_name(node.target)} is in-place"
        return ""
    if node.op == "call_method":
        m = str(node.target)
        if m in _RANDOM_METHODS:
            return f".{m}() draws from the global RNG"
        if m.endswith("_") and not m.endswith("__"):
            return f".{m}() is in-place (it mutates its input)"
        return ""
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        if isinstance(mod, _RANDOM_MODULES):
            return f"module {node.target!r} ({type(mod).__name__}) draws from the global RNG"
        if any(True for _ in mod.parameters()):
            return f"module {node.target!r} ({type(mod).__name__}) reads parameters"
        if any(True for _ in mod.buffers()):
            return f"module {node.target!r} ({type(mod).__name__}) reads buffers"
        return ""
    return f"unknown node kind {node.op}"  # pragma: no cover


@dataclass
class Cut:
    """Where the program was cut: which graph nodes moved to workers and why the rest did not."""

    program: str
    dataset_moved: bool
    prefix_nodes: list[str] = field(default_factory=list)
    suffix_nodes: list[str] = field(default_factory=list)
    frontier: list[str] = field(default_factory=list)
    stopped: dict[str, str] = field(default_factory=dict)  # first stateful nodes -> reason
    traced: bool = True
    graph: Any = None  # the traced GraphModule, for drawing

    @property
    def kind(self) -> str:
        """'traced prefix' when model operators moved, 'dataset only' when only Dataset+collate did."""
        return "traced prefix" if self.prefix_nodes else "dataset only"

    def summary(self) -> str:
        """One paragraph: what moved to the data workers and where the cut stopped."""
        moved = ", ".join(self.prefix_nodes) or "no model operators"
        why = "; ".join(f"{n}: {r}" for n, r in list(self.stopped.items())[:3])
        return (f"{self.program}: Dataset + collate_fn and {moved} run on data workers; "
                f"the trainer receives {', '.join(self.frontier)}; the cut stops at {why or 'the output'}.")

    def edges(self) -> list[tuple[str, str]]:
        """(producer, consumer) pairs of the traced graph, for drawing the cut."""
        if self.graph is None:
            return []
        return [(a.name, n.name) for n in self.graph.graph.nodes for a in n.all_input_nodes]


class StatelessPart:
    """The moved part of a program: keys -> Dataset -> collate_fn -> model prefix -> batch.

    Picklable and pure: the same keys give the same batch on any worker.
    """

    def __init__(self, dataset: Any, collate_fn: Callable, prefix: fx.GraphModule | None, n_inputs: int) -> None:
        self.dataset, self.collate_fn, self.prefix, self.n_inputs = dataset, collate_fn, prefix, n_inputs

    def __call__(self, keys: list[int]) -> tuple:
        batch = self.collate_fn([self.dataset[k] for k in keys])
        if not isinstance(batch, (tuple, list)):
            raise ExtractionError(f"collate_fn returned {type(batch).__name__}; expected a tuple "
                                  "(*model_inputs, target)")
        inputs, target = tuple(batch[:-1]), batch[-1]
        if self.prefix is None:
            return (*inputs, target)
        with torch.no_grad():
            out = self.prefix(*inputs)
        return (*out, target)


@dataclass
class Split:
    """A program cut in two: `stateless` for the data workers, `trainer_model` for the trainer."""

    program: Program
    stateless: StatelessPart
    trainer_model: nn.Module
    cut: Cut

    def loss(self, batch: tuple) -> torch.Tensor:
        """Trainer-side loss of one batch produced by `stateless`."""
        return self.program.loss_fn(self.trainer_model(*batch[:-1]), batch[-1])


def _check_dataset(program: Program, probe_key: int) -> None:
    """Raise ExtractionError unless the Dataset and collate_fn are picklable, deterministic and pure."""
    ds = program.dataset
    for what, obj in (("Dataset", ds), ("collate_fn", program.collate_fn)):
        try:
            pickle.dumps(obj)
        except Exception as exc:  # noqa: BLE001 - any pickling failure means it cannot move
            raise ExtractionError(f"cannot cut {program.name!r}: the {what} ({type(obj).__name__}) cannot be "
                                  f"sent to a data worker: {type(exc).__name__}: {exc}") from None
    before = pickle.dumps(ds)
    a = program.collate_fn([ds[probe_key]])
    after_one = pickle.dumps(ds)
    b = program.collate_fn([ds[probe_key]])
    if before != after_one or after_one != pickle.dumps(ds):
        old, new = pickle.loads(before).__dict__, ds.__dict__
        changed = [k for k in new if k not in old or not _same(old[k], new[k])]
        raise ExtractionError(f"cannot cut {program.name!r}: {type(ds).__name__}.__getitem__({probe_key}) is "
                              f"stateful: it changes attribute(s) {', '.join(changed) or '(unknown)'} of the Dataset")
    if not _same(a, b):
        raise ExtractionError(f"cannot cut {program.name!r}: {type(ds).__name__}[{probe_key}] returned different "
                              "values on two calls (unseeded randomness or hidden state); derive randomness "
                              "from the sample key")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        import numpy as np
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            return bool(np.array_equal(a, b))
    except ImportError:  # pragma: no cover
        pass
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def trace(model: nn.Module, program_name: str = "program") -> fx.GraphModule:
    """Return `model` traced by torch.fx, or raise ExtractionError saying why and where tracing failed."""
    try:
        return fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001 - fx raises many kinds; all mean "cannot trace"
        where = _where(exc)
        raise ExtractionError(f"cannot cut {program_name!r}: torch.fx cannot trace {type(model).__name__}.forward"
                              f"{where}: {type(exc).__name__}: {str(exc).splitlines()[0]}") from None


def _where(exc: BaseException) -> str:
    import traceback
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "torch/fx" not in f.filename
              and "torch\\fx" not in f.filename and "dataworkers/extract" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" at {f.filename.rsplit('/', 1)[-1]}:{f.lineno} ({f.line})"


def extract(program: Program, *, model_cut: bool = True, check: bool = True, check_batches: int = 2) -> Split:
    """Cut `program` into a stateless part (for data workers) and a trainer part, and verify it.

    With ``model_cut=False`` only the Dataset and collate_fn move (no tracing).
    Raises ExtractionError when the Dataset is stateful, the model cannot be traced, or the
    split program does not reproduce the monolithic batches and loss. A `program` that is not a
    :class:`~labkit.dataworkers.workloads.Program`, or `check_batches` not an integer >= 1, raises
    ValueError naming it before anything runs.
    """
    if not isinstance(program, Program):
        shown = program if isinstance(program, (str, int, float, type(None))) else type(program).__name__
        raise bad_value("program", shown, "a labkit.dataworkers.workloads.Program (e.g. from image_program() or "
                        "ctr_program(), or Program(name, dataset, collate_fn, model, loss_fn, batch_size))")
    check_batches = int(check_range("check_batches", check_batches, 1, integer=True))
    keys = program.batches(0, limit=1)
    if not keys:
        raise ExtractionError(f"cannot cut {program.name!r}: the dataset has fewer than batch_size="
                              f"{program.batch_size} samples")
    _check_dataset(program, keys[0][0])
    sample = program.load(keys[0])
    if not isinstance(sample, (tuple, list)) or len(sample) < 2:
        raise ExtractionError(f"cannot cut {program.name!r}: collate_fn must return (*model_inputs, target); "
                              f"got {type(sample).__name__}")
    n_inputs = len(sample) - 1
    if not model_cut:
        cut = Cut(program.name, True, frontier=[f"input{i}" for i in range(n_inputs)], traced=False)
        split = Split(program, StatelessPart(program.dataset, program.collate_fn, None, n_inputs), program.model, cut)
    else:
        split = _split_model(program, n_inputs)
    if check:
        check_equivalence(program, split, batches=check_batches)
    return split


def _split_model(program: Program, n_inputs: int) -> Split:
    model = program.model
    gm = trace(model, program.name)
    # The user's model decides what is state: fx re-registers plain tensor constants as buffers.
    params = {n for n, _ in model.named_parameters()}
    buffers = {n for n, _ in model.named_buffers()}
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if len(placeholders) != n_inputs:
        raise ExtractionError(f"cannot cut {program.name!r}: forward takes {len(placeholders)} inputs but "
                              f"collate_fn produces {n_inputs} (+ target)")
    stateless: set[fx.Node] = set()
    stopped: dict[str, str] = {}
    for n in nodes:
        why = node_verdict(n, gm, params, buffers)
        deps_ok = all(a in stateless for a in n.all_input_nodes)
        if not why and deps_ok:
            stateless.add(n)
        elif why and deps_ok and n.op != "output":
            stopped[n.name] = why
    # A pure node whose value nobody but other moved nodes needs still moves; frontier = moved
    # values the trainer side (or the output) consumes.
    frontier = [n for n in nodes if n in stateless and any(u not in stateless for u in n.users)]
    moved = [n for n in nodes if n in stateless and n.op not in ("placeholder", "get_attr")]
    cut = Cut(program.name, True, [n.name for n in moved],
              [n.name for n in nodes if n not in stateless and n.op != "output"],
              [n.name for n in frontier], stopped, True, gm)
    if not moved:
        part = StatelessPart(program.dataset, program.collate_fn, None, n_inputs)
        return Split(program, part, model, cut)
    prefix = _subgraph(gm, [n for n in nodes if n in stateless], placeholders, frontier)
    suffix = _suffix(gm, nodes, stateless, frontier)
    return Split(program, StatelessPart(program.dataset, program.collate_fn, prefix, n_inputs), suffix, cut)


def _subgraph(gm: fx.GraphModule, keep: list[fx.Node], inputs: list[fx.Node], outputs: list[fx.Node]) -> fx.GraphModule:
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in keep:
        env[n] = g.node_copy(n, lambda a: env[a])
        if n.op == "placeholder":
            env[n].type = None  # string annotations break GraphModule pickling
    g.output(tuple(env[o] for o in outputs))
    # The prefix holds only constants: deep-copy so workers never share the trainer's modules.
    return fx.GraphModule(copy.deepcopy(gm), g, class_name="StatelessPrefix")


def _suffix(gm: fx.GraphModule, nodes: list[fx.Node], stateless: set[fx.Node],
            frontier: list[fx.Node]) -> fx.GraphModule:
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for f in frontier:
        env[f] = g.placeholder(f.name)  # no type annotation, so the module pickles
    for n in nodes:
        if n in stateless:
            continue
        env[n] = g.node_copy(n, lambda a: env[a])
    # Sharing gm's modules means the trainer part trains the user's own parameters.
    return fx.GraphModule(gm, g, class_name="TrainerPart")


def check_equivalence(program: Program, split: Split, *, batches: int = 2, epoch: int = 0,
                      rtol: float = 1e-5, atol: float = 1e-6) -> dict:
    """Run the monolithic and the split program on the same keys; raise ExtractionError on any difference.

    The stateless part runs on a pickled copy, as it would on a data worker. Returns
    {"batches": n, "max_loss_diff": d}.
    """
    batches = int(check_range("batches", batches, 1, integer=True))  # 0 batches would "prove" any split
    epoch = int(check_range("epoch", epoch, 0, integer=True))
    worker_part = pickle.loads(pickle.dumps(split.stateless))
    worst = 0.0
    keys_list = program.batches(epoch, limit=batches)
    with torch.no_grad():
        for b, keys in enumerate(keys_list):
            mono = program.load(keys)
            got = worker_part(keys)
            if not _same(mono[-1], got[-1]):
                raise ExtractionError(f"split of {program.name!r} is not equivalent: batch {b} targets differ")
            inputs = tuple(mono[:-1])
            expected = tuple(split.stateless.prefix(*inputs)) if split.stateless.prefix is not None else inputs
            if not _same(expected, tuple(got[:-1])):
                raise ExtractionError(f"split of {program.name!r} is not equivalent: batch {b} inputs differ from the "
                                      "monolithic program's (the Dataset or collate_fn depends on where it runs)")
            direct = split.stateless(keys)
            if not _same(direct, got):
                raise ExtractionError(f"split of {program.name!r} is not equivalent: batch {b} differs between the "
                                      "trainer's copy and a worker's copy of the stateless part (hidden state)")
            l_mono = program.loss_fn(program.model(*mono[:-1]), mono[-1])
            l_split = split.loss(got)
            d = float((l_mono - l_split).abs())
            if not torch.allclose(l_mono, l_split, rtol=rtol, atol=atol):
                raise ExtractionError(f"split of {program.name!r} is not equivalent: batch {b} loss "
                                      f"{float(l_mono):.6g} (monolithic) vs {float(l_split):.6g} (split)")
            worst = max(worst, d)
    return {"batches": len(keys_list), "max_loss_diff": worst}
