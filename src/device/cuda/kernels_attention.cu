// Causal attention, fused and memory-efficient (the flash-attention scheme on CUDA cores in
// fp32): scores live only in shared memory, one tile at a time, and the softmax is computed
// online; forward keeps each row's log-sum-exp so backward recomputes the probabilities.
// Backward runs two kernels that each own their outputs, so nothing is summed with atomics:
// one per key tile (dk, dv: over its group's query heads and the query tiles, in order) and
// one per query tile (dq: over the key tiles, in order).
//
// Work split, the same in all three kernels: a block has 8 warps; a warp owns 4 rows of its
// own side (queries, or keys for dk/dv) and its lanes take the other side's rows lane and
// lane + 32 of a 64-row tile for the dot products, then the dims lane + 32j for the sums
// over that tile. Shared rows that lanes read at different rows are padded by one float so
// a warp's 32 reads hit 32 banks.
#include <cmath>

#include "device/cuda/launch.cuh"

namespace strata::device::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int kOwnRows = 4;                  // rows a warp owns
constexpr int kOwnTile = kWarps * kOwnRows;  // 32 rows a block owns
constexpr int kSweepTile = 64;               // rows of the swept side per step: lane and lane + 32

// Pointer arithmetic of one (batch, head) row.
struct Rows {
  const float* base;
  int stride;
  __device__ const float* at(int b, int T, int t, int head, int hd) const {
    return base + (static_cast<std::size_t>(b) * T + t) * stride + static_cast<std::size_t>(head) * hd;
  }
};

// Copies rows [first, first + count) of one head into shared rows of `pitch` floats; rows at
// or past T are zero.
__device__ void load_rows(float* dst, int pitch, Rows src, int b, int T, int first, int count, int head, int hd) {
  for (int idx = threadIdx.x; idx < count * hd; idx += kThreads) {
    const int r = idx / hd, d = idx % hd, t = first + r;
    dst[r * pitch + d] = t < T ? src.at(b, T, t, head, hd)[d] : 0.f;
  }
}

// dots[i][half] = own row (warp * 4 + i) . swept row (lane + 32 half) over hd dims: own rows
// [32][HD] (one address a warp: a broadcast), swept rows [64][HD + 1] (padded: 32 banks).
template <int HD>
__device__ __forceinline__ void own_by_swept(float (&dots)[kOwnRows][2], const float* own, const float* swept,
                                             int hd) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
#pragma unroll
  for (int i = 0; i < kOwnRows; ++i) dots[i][0] = dots[i][1] = 0.f;
  for (int d = 0; d < hd; ++d) {
    const float a = swept[lane * (HD + 1) + d], b = swept[(lane + kWarp) * (HD + 1) + d];
#pragma unroll
    for (int i = 0; i < kOwnRows; ++i) {
      const float o = own[(warp * kOwnRows + i) * HD + d];
      dots[i][0] += o * a;
      dots[i][1] += o * b;
    }
  }
}

// acc[i][j] += sum over swept rows r in [first, last) of weights[own row (warp * 4 + i)][r] *
// rows[r][lane + 32 j]: the weights one address a warp, the rows' dims consecutive lanes.
template <int HD>
__device__ __forceinline__ void add_weighted_rows(float (&acc)[kOwnRows][HD / kWarp], const float* weights,
                                                  const float* rows, int pitch, int first, int last) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int r = first; r < last; ++r) {
    float row[HD / kWarp];
#pragma unroll
    for (int j = 0; j < HD / kWarp; ++j) row[j] = rows[r * pitch + lane + j * kWarp];
#pragma unroll
    for (int i = 0; i < kOwnRows; ++i) {
      const float w = weights[(warp * kOwnRows + i) * kSweepTile + r];
#pragma unroll
      for (int j = 0; j < HD / kWarp; ++j) acc[i][j] += w * row[j];
    }
  }
}

template <int HD>
constexpr std::size_t forward_smem_floats() {
  return kOwnTile * HD + kSweepTile * (HD + 1) + kSweepTile * HD + kOwnTile * kSweepTile;
}
template <int HD>
constexpr std::size_t dkv_smem_floats() {
  return 2 * kOwnTile * HD + 2 * kSweepTile * (HD + 1) + 2 * kSweepTile + 2 * kOwnTile * kSweepTile;
}
template <int HD>
constexpr std::size_t dq_smem_floats() {
  return 2 * kOwnTile * HD + 2 * kSweepTile * (HD + 1) + 2 * kOwnTile + kOwnTile * kSweepTile;
}

// ---------------------------------------------------------------------------------------
// Forward: block = (32 queries, batch * NH + head); sweeps key tiles of 64 up to the diagonal.

template <int HD>
__global__ void __launch_bounds__(kThreads) attention_forward_kernel(float* out, float* lse, Rows q, Rows k, Rows v,
                                                                     int out_stride, AttentionShape s, float scale) {
  constexpr int kDims = HD / kWarp;  // dims per lane
  extern __shared__ float smem[];
  float* Qs = smem;                          // [32][HD]
  float* Ks = Qs + kOwnTile * HD;            // [64][HD + 1]
  float* Vs = Ks + kSweepTile * (HD + 1);    // [64][HD]
  float* Ps = Vs + kSweepTile * HD;          // [32][64]
  const int bh = blockIdx.y, b = bh / s.NH, h = bh % s.NH, g = h / (s.NH / s.NKV);
  const int q0 = blockIdx.x * kOwnTile;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int hd = s.hd, T = s.T;

  load_rows(Qs, HD, q, b, T, q0, kOwnTile, h, hd);

  float m[kOwnRows], l[kOwnRows], o[kOwnRows][kDims];
  #pragma unroll
  for (int i = 0; i < kOwnRows; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.f;
    #pragma unroll
    for (int j = 0; j < kDims; ++j) o[i][j] = 0.f;
  }
  const int warp_last_query = q0 + warp * kOwnRows + kOwnRows - 1;
  const int block_last_query = min(q0 + kOwnTile, T) - 1;
  for (int k0 = 0; k0 <= block_last_query; k0 += kSweepTile) {
    __syncthreads();  // the previous tile's Ks and Vs are no longer read
    load_rows(Ks, HD + 1, k, b, T, k0, kSweepTile, g, hd);
    load_rows(Vs, HD, v, b, T, k0, kSweepTile, g, hd);
    __syncthreads();

    float sc[kOwnRows][2];
    own_by_swept<HD>(sc, Qs, Ks, hd);
    #pragma unroll
    for (int i = 0; i < kOwnRows; ++i) {
      const int query = q0 + warp * kOwnRows + i;
      float p[2];
      float tile_max = -INFINITY;
      #pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = k0 + lane + half * kWarp;
        sc[i][half] = key <= query && key < T ? sc[i][half] * scale : -INFINITY;
        tile_max = fmaxf(tile_max, sc[i][half]);
      }
      const float m_new = fmaxf(m[i], warp_max(tile_max));
      // A row with no key yet (m_new = -inf) keeps zeros: exp(-inf - -inf) would be NaN.
      const float correction = m[i] == -INFINITY ? 0.f : expf(m[i] - m_new);
      #pragma unroll
      for (int half = 0; half < 2; ++half) p[half] = sc[i][half] == -INFINITY ? 0.f : expf(sc[i][half] - m_new);
      l[i] = l[i] * correction + warp_sum(p[0] + p[1]);
      m[i] = m_new;
      #pragma unroll
      for (int j = 0; j < kDims; ++j) o[i][j] *= correction;
      Ps[(warp * kOwnRows + i) * kSweepTile + lane] = p[0];
      Ps[(warp * kOwnRows + i) * kSweepTile + lane + kWarp] = p[1];
    }
    __syncwarp();
    const int keys = min(kSweepTile, min(T, warp_last_query + 1) - k0);  // past it every p is 0
    add_weighted_rows<HD>(o, Ps, Vs, HD, 0, keys);
  }
  #pragma unroll
  for (int i = 0; i < kOwnRows; ++i) {
    const int query = q0 + warp * kOwnRows + i;
    if (query >= T) continue;
    float* dst = out + (static_cast<std::size_t>(b) * T + query) * out_stride + static_cast<std::size_t>(h) * hd;
    const float inv = 1.f / l[i];
    #pragma unroll
    for (int j = 0; j < kDims; ++j)
      if (lane + j * kWarp < hd) dst[lane + j * kWarp] = o[i][j] * inv;
    if (lane == 0) lse[static_cast<std::size_t>(bh) * T + query] = m[i] + logf(l[i]);
  }
}

// ---------------------------------------------------------------------------------------
// Backward

// delta[b, h, t] = dout . out over the head's dims: one warp per (b, t, h).
__global__ void attention_delta_kernel(float* delta, Rows dout, Rows out, AttentionShape s) {
  const std::size_t row = blockIdx.x * static_cast<std::size_t>(kWarps) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= static_cast<std::size_t>(s.B) * s.T * s.NH) return;
  const int h = static_cast<int>(row % s.NH);
  const std::size_t bt = row / s.NH;
  const int b = static_cast<int>(bt / s.T), t = static_cast<int>(bt % s.T);
  const float* dr = dout.at(b, s.T, t, h, s.hd);
  const float* orow = out.at(b, s.T, t, h, s.hd);
  float acc = 0.f;
  for (int d = lane; d < s.hd; d += kWarp) acc += dr[d] * orow[d];
  acc = warp_sum(acc);
  if (lane == 0) delta[(static_cast<std::size_t>(b) * s.NH + h) * s.T + t] = acc;
}

// dk, dv: block = (32 keys, batch * NKV + kv head); sweeps the group's query heads, and for
// each the query tiles of 64 from the diagonal on.
template <int HD>
__global__ void __launch_bounds__(kThreads) attention_dkv_kernel(float* dk, float* dv, Rows dout, Rows q, Rows k,
                                                                 Rows v, const float* lse, const float* delta,
                                                                 int kv_stride, AttentionShape s, float scale) {
  constexpr int kDims = HD / kWarp;
  extern __shared__ float smem[];
  float* Ks = smem;                             // [32][HD]
  float* Vs = Ks + kOwnTile * HD;               // [32][HD]
  float* Qs = Vs + kOwnTile * HD;               // [64][HD + 1]
  float* dOs = Qs + kSweepTile * (HD + 1);      // [64][HD + 1]
  float* lse_s = dOs + kSweepTile * (HD + 1);   // [64]
  float* delta_s = lse_s + kSweepTile;          // [64]
  float* Ps = delta_s + kSweepTile;             // [32][64]
  float* dSs = Ps + kOwnTile * kSweepTile;      // [32][64]
  const int bg = blockIdx.y, b = bg / s.NKV, g = bg % s.NKV, group = s.NH / s.NKV;
  const int k0 = blockIdx.x * kOwnTile;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int hd = s.hd, T = s.T;

  load_rows(Ks, HD, k, b, T, k0, kOwnTile, g, hd);
  load_rows(Vs, HD, v, b, T, k0, kOwnTile, g, hd);

  float dk_acc[kOwnRows][kDims], dv_acc[kOwnRows][kDims];
  #pragma unroll
  for (int i = 0; i < kOwnRows; ++i)
    #pragma unroll
    for (int j = 0; j < kDims; ++j) dk_acc[i][j] = dv_acc[i][j] = 0.f;
  const int warp_first_key = k0 + warp * kOwnRows;

  for (int h = g * group; h < (g + 1) * group; ++h) {
    const float* lse_h = lse + (static_cast<std::size_t>(b) * s.NH + h) * T;
    const float* delta_h = delta + (static_cast<std::size_t>(b) * s.NH + h) * T;
    for (int q0 = k0 / kSweepTile * kSweepTile; q0 < T; q0 += kSweepTile) {
      __syncthreads();  // the previous tile is no longer read
      load_rows(Qs, HD + 1, q, b, T, q0, kSweepTile, h, hd);
      load_rows(dOs, HD + 1, dout, b, T, q0, kSweepTile, h, hd);
      if (threadIdx.x < kSweepTile) {
        const int t = q0 + threadIdx.x;
        lse_s[threadIdx.x] = t < T ? lse_h[t] : 0.f;
        delta_s[threadIdx.x] = t < T ? delta_h[t] : 0.f;
      }
      __syncthreads();

      float sc[kOwnRows][2], dp[kOwnRows][2];
      own_by_swept<HD>(sc, Ks, Qs, hd);
      own_by_swept<HD>(dp, Vs, dOs, hd);
      #pragma unroll
      for (int i = 0; i < kOwnRows; ++i) {
        const int key = warp_first_key + i;
        #pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int ql = lane + half * kWarp, query = q0 + ql;
          const bool valid = key <= query && query < T && key < T;
          const float p = valid ? expf(sc[i][half] * scale - lse_s[ql]) : 0.f;
          Ps[(warp * kOwnRows + i) * kSweepTile + ql] = p;
          dSs[(warp * kOwnRows + i) * kSweepTile + ql] = p * (dp[i][half] - delta_s[ql]);
        }
      }
      __syncwarp();
      const int first = max(0, warp_first_key - q0);  // queries before the warp's first key add 0
      const int last = min(kSweepTile, T - q0);
      add_weighted_rows<HD>(dv_acc, Ps, dOs, HD + 1, first, last);
      add_weighted_rows<HD>(dk_acc, dSs, Qs, HD + 1, first, last);
    }
  }
  #pragma unroll
  for (int i = 0; i < kOwnRows; ++i) {
    const int key = warp_first_key + i;
    if (key >= T) continue;
    const std::size_t at = (static_cast<std::size_t>(b) * T + key) * kv_stride + static_cast<std::size_t>(g) * hd;
    #pragma unroll
    for (int j = 0; j < kDims; ++j) {
      const int d = lane + j * kWarp;
      if (d >= hd) continue;
      dk[at + d] = dk_acc[i][j] * scale;
      dv[at + d] = dv_acc[i][j];
    }
  }
}

// dq: block = (32 queries, batch * NH + head); sweeps key tiles of 64 up to the diagonal.
template <int HD>
__global__ void __launch_bounds__(kThreads) attention_dq_kernel(float* dq, Rows dout, Rows q, Rows k, Rows v,
                                                                const float* lse, const float* delta, int q_stride,
                                                                AttentionShape s, float scale) {
  constexpr int kDims = HD / kWarp;
  extern __shared__ float smem[];
  float* Qs = smem;                          // [32][HD]
  float* dOs = Qs + kOwnTile * HD;           // [32][HD]
  float* Ks = dOs + kOwnTile * HD;           // [64][HD + 1]
  float* Vs = Ks + kSweepTile * (HD + 1);    // [64][HD + 1]
  float* lse_s = Vs + kSweepTile * (HD + 1); // [32]
  float* delta_s = lse_s + kOwnTile;         // [32]
  float* dSs = delta_s + kOwnTile;           // [32][64]
  const int bh = blockIdx.y, b = bh / s.NH, h = bh % s.NH, g = h / (s.NH / s.NKV);
  const int q0 = blockIdx.x * kOwnTile;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int hd = s.hd, T = s.T;

  load_rows(Qs, HD, q, b, T, q0, kOwnTile, h, hd);
  load_rows(dOs, HD, dout, b, T, q0, kOwnTile, h, hd);
  if (threadIdx.x < kOwnTile) {
    const int t = q0 + threadIdx.x;
    lse_s[threadIdx.x] = t < T ? lse[static_cast<std::size_t>(bh) * T + t] : 0.f;
    delta_s[threadIdx.x] = t < T ? delta[static_cast<std::size_t>(bh) * T + t] : 0.f;
  }

  float dq_acc[kOwnRows][kDims];
  #pragma unroll
  for (int i = 0; i < kOwnRows; ++i)
    #pragma unroll
    for (int j = 0; j < kDims; ++j) dq_acc[i][j] = 0.f;
  const int warp_last_query = q0 + warp * kOwnRows + kOwnRows - 1;
  const int block_last_query = min(q0 + kOwnTile, T) - 1;
  for (int k0 = 0; k0 <= block_last_query; k0 += kSweepTile) {
    __syncthreads();
    load_rows(Ks, HD + 1, k, b, T, k0, kSweepTile, g, hd);
    load_rows(Vs, HD + 1, v, b, T, k0, kSweepTile, g, hd);
    __syncthreads();

    float sc[kOwnRows][2], dp[kOwnRows][2];
    own_by_swept<HD>(sc, Qs, Ks, hd);
    own_by_swept<HD>(dp, dOs, Vs, hd);
    #pragma unroll
    for (int i = 0; i < kOwnRows; ++i) {
      const int r = warp * kOwnRows + i, query = q0 + r;
      #pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = k0 + lane + half * kWarp;
        const bool valid = key <= query && query < T && key < T;
        const float p = valid ? expf(sc[i][half] * scale - lse_s[r]) : 0.f;
        dSs[r * kSweepTile + lane + half * kWarp] = p * (dp[i][half] - delta_s[r]);
      }
    }
    __syncwarp();
    const int keys = min(kSweepTile, min(T, warp_last_query + 1) - k0);
    add_weighted_rows<HD>(dq_acc, dSs, Ks, HD + 1, 0, keys);
  }
  #pragma unroll
  for (int i = 0; i < kOwnRows; ++i) {
    const int query = q0 + warp * kOwnRows + i;
    if (query >= T) continue;
    const std::size_t at = (static_cast<std::size_t>(b) * T + query) * q_stride + static_cast<std::size_t>(h) * hd;
    #pragma unroll
    for (int j = 0; j < kDims; ++j) {
      const int d = lane + j * kWarp;
      if (d < hd) dq[at + d] = dq_acc[i][j] * scale;
    }
  }
}

void check_shape(const char* name, const AttentionShape& s) {
  require(s.B > 0 && s.T > 0, name, "B and T must be positive");
  require(s.NH > 0 && s.NKV > 0 && s.NH % s.NKV == 0, name,
          "NKV = " + std::to_string(s.NKV) + " must divide NH = " + std::to_string(s.NH));
  require(s.hd > 0 && s.hd <= 128, name, "hd = " + std::to_string(s.hd) + " must be in [1, 128]");
  require(s.q_stride >= s.NH * s.hd, name, "q_stride is less than NH * hd");
  require(s.kv_stride >= s.NKV * s.hd, name, "kv_stride is less than NKV * hd");
  require(s.out_stride >= s.NH * s.hd, name, "out_stride is less than NH * hd");
  require(static_cast<long long>(s.B) * s.NH <= 65535, name, "B * NH exceeds 65535");
}

// Dynamic shared memory above 48 KiB must be allowed per kernel.
template <class Kernel>
void allow_smem(Kernel kernel, std::size_t bytes, const char* name) {
  const cudaError_t status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  require(status == cudaSuccess, name,
          std::string("cannot reserve ") + std::to_string(bytes) + " bytes of shared memory: " +
              cudaGetErrorString(status));
}

template <int HD>
void forward(float* out, float* lse, const float* q, const float* k, const float* v, const AttentionShape& s,
             Stream stream) {
  const std::size_t bytes = forward_smem_floats<HD>() * sizeof(float);
  allow_smem(attention_forward_kernel<HD>, bytes, "attention_forward");
  const dim3 grid(blocks_for(s.T, kOwnTile), s.B * s.NH);
  attention_forward_kernel<HD><<<grid, kThreads, bytes, stream>>>(
      out, lse, Rows{q, s.q_stride}, Rows{k, s.kv_stride}, Rows{v, s.kv_stride}, s.out_stride, s,
      1.f / std::sqrt(static_cast<float>(s.hd)));
  check_launch("attention_forward");
}

template <int HD>
void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k, const float* v,
              const float* lse, const float* delta, const AttentionShape& s, Stream stream) {
  const float scale = 1.f / std::sqrt(static_cast<float>(s.hd));
  const std::size_t dkv_bytes = dkv_smem_floats<HD>() * sizeof(float);
  allow_smem(attention_dkv_kernel<HD>, dkv_bytes, "attention_backward");
  attention_dkv_kernel<HD><<<dim3(blocks_for(s.T, kOwnTile), s.B * s.NKV), kThreads, dkv_bytes, stream>>>(
      dk, dv, Rows{dout, s.out_stride}, Rows{q, s.q_stride}, Rows{k, s.kv_stride}, Rows{v, s.kv_stride}, lse, delta,
      s.kv_stride, s, scale);
  check_launch("attention_backward");
  const std::size_t dq_bytes = dq_smem_floats<HD>() * sizeof(float);
  allow_smem(attention_dq_kernel<HD>, dq_bytes, "attention_backward");
  attention_dq_kernel<HD><<<dim3(blocks_for(s.T, kOwnTile), s.B * s.NH), kThreads, dq_bytes, stream>>>(
      dq, Rows{dout, s.out_stride}, Rows{q, s.q_stride}, Rows{k, s.kv_stride}, Rows{v, s.kv_stride}, lse, delta,
      s.q_stride, s, scale);
  check_launch("attention_backward");
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionShape& shape, Stream stream) {
  check_shape("attention_forward", shape);
  if (shape.hd <= 64)
    forward<64>(out, lse, q, k, v, shape, stream);
  else
    forward<128>(out, lse, q, k, v, shape, stream);
}

std::size_t attention_backward_scratch_bytes(const AttentionShape& shape) {
  return static_cast<std::size_t>(shape.B) * shape.NH * shape.T * sizeof(float);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, const AttentionShape& shape, void* scratch,
                        Stream stream) {
  check_shape("attention_backward", shape);
  require(scratch != nullptr, "attention_backward", "scratch is null");
  auto* delta = static_cast<float*>(scratch);
  const std::size_t rows = static_cast<std::size_t>(shape.B) * shape.T * shape.NH;
  attention_delta_kernel<<<blocks_for(rows, kWarps), kThreads, 0, stream>>>(delta, Rows{dout, shape.out_stride},
                                                                            Rows{out, shape.out_stride}, shape);
  check_launch("attention_backward");
  if (shape.hd <= 64)
    backward<64>(dq, dk, dv, dout, q, k, v, lse, delta, shape, stream);
  else
    backward<128>(dq, dk, dv, dout, q, k, v, lse, delta, shape, stream);
}

}  // namespace strata::device::cuda
