// Flash-LLM SpMM on tensor cores: Y (M x N, fp32) += W (M x K, Tiled-CSL fp16) @ X (K x N, fp16).
//
// Tiled-CSL as the paper lays it out for the GPU: 128 x 64 tiles, one offset per tile into a
// stream of 32-bit words, each word = fp16 value bits (high half) | location r * 64 + c (low
// half, 13 bits used). Tiles are stored row-major over the (M/128) x (K/64) tile grid.
//
// Pipeline of one thread block (128 threads = 4 warps, one 128-row tile row, a range of tile
// columns given by split-K):
//   1. load as sparse: the next tile's words go from global memory into registers (up to
//      WORDS_PER_THREAD per thread; a rare denser tile reads the rest directly) together with the
//      next 64 x NT slice of X, while the tensor cores work on the current tile (double buffering);
//   2. expand: zero the free shared-memory tile, scatter the words into it;
//   3. compute as dense: each warp multiplies its 32 x 64 slab of the dense tile with the X slice
//      on tensor cores (wmma 16x16x16, fp16 in, fp32 accumulate).
// Split-K (gridDim.y > 1) gives small-N problems enough blocks; partial sums meet with atomicAdd.
//
// Compile check: nvcc -arch=sm_80 -c flash_llm.cu (done by tests when nvcc is present).

#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

#define TILE_M 128
#define TILE_K 64
#define THREADS 128
#define WORDS_PER_THREAD 16
#define A_LD (TILE_K + 8)  // row pitch in halves; +8 breaks shared-memory bank conflicts

template <int NT>
struct Smem {
    __half a[2][TILE_M * A_LD];
    __half b[2][TILE_K * (NT + 8)];
};

template <int NT>
__device__ __forceinline__ void stage_load(const unsigned int* __restrict__ words, long long p0, long long p1,
                                           const __half* __restrict__ x, int ldx, int k0, int K,
                                           unsigned int (&wreg)[WORDS_PER_THREAD], int& wcount,
                                           __half2 (&xreg)[(TILE_K * NT) / (2 * THREADS)]) {
    const int tid = threadIdx.x;
    const long long cnt = p1 - p0;
    wcount = 0;
#pragma unroll
    for (int i = 0; i < WORDS_PER_THREAD; ++i) {
        long long idx = (long long)i * THREADS + tid;
        if (idx < cnt) {
            wreg[i] = __ldg(words + p0 + idx);
            wcount = i + 1;
        }
    }
    // X slice: TILE_K rows x NT columns, read as half2 pairs, coalesced along N
    constexpr int PAIRS = (TILE_K * NT) / 2;
#pragma unroll
    for (int i = 0; i < PAIRS / THREADS; ++i) {
        int e = (i * THREADS + tid) * 2;
        int r = e / NT, c = e % NT;
        int k = k0 + r;
        xreg[i] = (k < K) ? *reinterpret_cast<const __half2*>(x + (long long)k * ldx + c) : __floats2half2_rn(0.f, 0.f);
    }
}

template <int NT>
__device__ __forceinline__ void stage_store(Smem<NT>& sm, int buf, const unsigned int* __restrict__ words,
                                            long long p0, long long p1, const unsigned int (&wreg)[WORDS_PER_THREAD],
                                            int wcount, const __half2 (&xreg)[(TILE_K * NT) / (2 * THREADS)]) {
    const int tid = threadIdx.x;
    // zero the dense tile (uint4 = 8 halves per store)
    uint4* az = reinterpret_cast<uint4*>(sm.a[buf]);
    for (int i = tid; i < (TILE_M * A_LD) / 8; i += THREADS) az[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
    // expand: scatter the compressed words into the dense tile
    for (int i = 0; i < wcount; ++i) {
        unsigned int w = wreg[i];
        unsigned int loc = w & 0xFFFFu;
        __half_raw hr;
        hr.x = (unsigned short)(w >> 16);
        sm.a[buf][(loc >> 6) * A_LD + (loc & 63)] = __half(hr);
    }
    for (long long idx = (long long)WORDS_PER_THREAD * THREADS + tid; idx < p1 - p0; idx += THREADS) {
        unsigned int w = __ldg(words + p0 + idx);  // overflow of a dense tile: straight from global
        unsigned int loc = w & 0xFFFFu;
        __half_raw hr;
        hr.x = (unsigned short)(w >> 16);
        sm.a[buf][(loc >> 6) * A_LD + (loc & 63)] = __half(hr);
    }
    constexpr int PAIRS = (TILE_K * NT) / 2;
#pragma unroll
    for (int i = 0; i < PAIRS / THREADS; ++i) {
        int e = (i * THREADS + tid) * 2;
        int r = e / NT, c = e % NT;
        *reinterpret_cast<__half2*>(&sm.b[buf][r * (NT + 8) + c]) = xreg[i];
    }
}

template <int NT>
__device__ void spmm_body(const unsigned int* __restrict__ words, const long long* __restrict__ tile_offsets,
                          const __half* __restrict__ x, float* __restrict__ y, int M, int K, int ldx, int ldy,
                          int tiles_k) {
    __shared__ __align__(128) Smem<NT> sm;  // wmma needs 32-byte aligned tile pointers
    const int tile_row = blockIdx.x;
    const int splits = gridDim.y;
    const int per = (tiles_k + splits - 1) / splits;
    const int t_begin = blockIdx.y * per;
    const int t_end = min(tiles_k, t_begin + per);
    const int warp = threadIdx.x / 32;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][NT / 16];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < NT / 16; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    unsigned int wreg[WORDS_PER_THREAD];
    __half2 xreg[(TILE_K * NT) / (2 * THREADS)];
    int wcount = 0;
    if (t_begin < t_end) {
        long long tile = (long long)tile_row * tiles_k + t_begin;
        stage_load<NT>(words, tile_offsets[tile], tile_offsets[tile + 1], x, ldx, t_begin * TILE_K, K, wreg, wcount, xreg);
        stage_store<NT>(sm, 0, words, tile_offsets[tile], tile_offsets[tile + 1], wreg, wcount, xreg);
    }
    __syncthreads();
    for (int t = t_begin; t < t_end; ++t) {
        const int buf = (t - t_begin) & 1;
        const bool has_next = t + 1 < t_end;
        long long nt0 = 0, nt1 = 0;
        if (has_next) {  // issue the next tile's global loads before computing on this one
            long long tile = (long long)tile_row * tiles_k + t + 1;
            nt0 = tile_offsets[tile];
            nt1 = tile_offsets[tile + 1];
            stage_load<NT>(words, nt0, nt1, x, ldx, (t + 1) * TILE_K, K, wreg, wcount, xreg);
        }
#pragma unroll
        for (int kk = 0; kk < TILE_K; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> af[2];
#pragma unroll
            for (int i = 0; i < 2; ++i)
                wmma::load_matrix_sync(af[i], sm.a[buf] + (warp * 32 + i * 16) * A_LD + kk, A_LD);
#pragma unroll
            for (int j = 0; j < NT / 16; ++j) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> bf;
                wmma::load_matrix_sync(bf, sm.b[buf] + kk * (NT + 8) + j * 16, NT + 8);
#pragma unroll
                for (int i = 0; i < 2; ++i) wmma::mma_sync(acc[i][j], af[i], bf, acc[i][j]);
            }
        }
        if (has_next) stage_store<NT>(sm, buf ^ 1, words, nt0, nt1, wreg, wcount, xreg);
        __syncthreads();
    }
    // write back: through shared memory (reusing the A tile) so rows past M can be masked
    float* stage = reinterpret_cast<float*>(sm.a[0]);  // 128 x 64 halves = 16 KiB >= 32 x 16 floats per warp
    float* wst = stage + warp * (16 * 16);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < NT / 16; ++j) {
            wmma::store_matrix_sync(wst, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = threadIdx.x % 32; e < 256; e += 32) {
                int r = tile_row * TILE_M + warp * 32 + i * 16 + e / 16;
                int c = j * 16 + e % 16;
                if (r < M) {
                    if (splits > 1) atomicAdd(y + (long long)r * ldy + c, wst[e]);
                    else y[(long long)r * ldy + c] += wst[e];
                }
            }
            __syncwarp();
        }
}

extern "C" __global__ void __launch_bounds__(THREADS)
tiled_csl_spmm_n16(const unsigned int* words, const long long* tile_offsets, const __half* x, float* y,
                   int M, int K, int ldx, int ldy, int tiles_k) {
    spmm_body<16>(words, tile_offsets, x, y, M, K, ldx, ldy, tiles_k);
}

extern "C" __global__ void __launch_bounds__(THREADS)
tiled_csl_spmm_n32(const unsigned int* words, const long long* tile_offsets, const __half* x, float* y,
                   int M, int K, int ldx, int ldy, int tiles_k) {
    spmm_body<32>(words, tile_offsets, x, y, M, K, ldx, ldy, tiles_k);
}
