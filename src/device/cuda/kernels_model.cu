// The model's kernels other than attention, the optimizer update and the casts.
// Row kernels give each row one warp (rows of a block are independent); column reductions go
// in two stages over fixed chunks of rows, so their order depends on the shapes alone.
#include <cmath>

#include "device/cuda/launch.cuh"

namespace strata::device::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / kWarp;  // one warp per row
constexpr int kRowsPerChunk = 64;                // rows a column-reduction thread sums in stage 1
constexpr int kSquaresPerBlock = 16384;          // floats a sum_squares block reduces in stage 1
constexpr float kLnEps = 1e-5f;                  // model/kernels_impl.inc's
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

int row_chunks(int N) { return (N + kRowsPerChunk - 1) / kRowsPerChunk; }

void check_rows(const char* launcher, int N, int C) {
  require(N > 0, launcher, "N = " + std::to_string(N) + " rows: must be positive");
  require(C > 0, launcher, "C = " + std::to_string(C) + " columns: must be positive");
}

// ---------------------------------------------------------------------------------------
// Column reductions: out_k[c] += sum over rows i of Term::value(k, i, c), k < Term::kOutputs.
// Stage 1: partial[k][chunk][c] sums the chunk's rows in order; stage 2 adds the chunks in
// order onto out_k.

template <class Term>
__global__ void column_partials(float* partial, Term term, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (c >= C) return;
  const int begin = chunk * kRowsPerChunk;
  const int end = min(N, begin + kRowsPerChunk);
  const std::size_t plane = static_cast<std::size_t>(gridDim.y) * C;
  float acc[Term::kOutputs];
  for (int k = 0; k < Term::kOutputs; ++k) acc[k] = 0.f;
  for (int i = begin; i < end; ++i)
    for (int k = 0; k < Term::kOutputs; ++k) acc[k] += term.value(k, i, c);
  for (int k = 0; k < Term::kOutputs; ++k) partial[k * plane + static_cast<std::size_t>(chunk) * C + c] = acc[k];
}

template <int kOutputs>
__global__ void column_totals(float* out0, float* out1, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const std::size_t plane = static_cast<std::size_t>(chunks) * C;
  for (int k = 0; k < kOutputs; ++k) {
    float* out = k == 0 ? out0 : out1;
    float acc = out[c];
    for (int chunk = 0; chunk < chunks; ++chunk) acc += partial[k * plane + static_cast<std::size_t>(chunk) * C + c];
    out[c] = acc;
  }
}

template <class Term>
void reduce_columns(float* out0, float* out1, Term term, int N, int C, void* scratch, Stream stream,
                    const char* launcher) {
  require(scratch != nullptr, launcher, "scratch is null");
  const int chunks = row_chunks(N);
  require(chunks <= 65535, launcher, "N = " + std::to_string(N) + " rows: at most 65535 * 64 are supported");
  auto* partial = static_cast<float*>(scratch);
  column_partials<Term><<<dim3(blocks_for(C, kThreads), chunks), kThreads, 0, stream>>>(partial, term, N, C);
  check_launch(launcher);
  column_totals<Term::kOutputs><<<blocks_for(C, kThreads), kThreads, 0, stream>>>(out0, out1, partial, chunks, C);
  check_launch(launcher);
}

struct StridedColumn {
  static constexpr int kOutputs = 1;
  const float* x;
  int ld;
  __device__ float value(int, int i, int c) const { return x[static_cast<std::size_t>(i) * ld + c]; }
};

// dw and db terms of LayerNorm: dout * normalized x, and dout.
struct LayerNormParamTerms {
  static constexpr int kOutputs = 2;
  const float *dout, *x, *mean, *rstd;
  int C;
  __device__ float value(int k, int i, int c) const {
    const std::size_t at = static_cast<std::size_t>(i) * C + c;
    return k == 0 ? dout[at] * ((x[at] - mean[i]) * rstd[i]) : dout[at];
  }
};

struct RmsNormWeightTerm {
  static constexpr int kOutputs = 1;
  const float *dout, *x, *rstd;
  int C;
  __device__ float value(int, int i, int c) const {
    const std::size_t at = static_cast<std::size_t>(i) * C + c;
    return dout[at] * x[at] * rstd[i];
  }
};

// ---------------------------------------------------------------------------------------
// Embeddings

__global__ void embed_forward_kernel(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                                     int N, int T, int C, int V) {
  const std::size_t total = static_cast<std::size_t>(N) * C;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t i = e / C, c = e % C;
    const std::int32_t token = tokens[i];
    if (token < 0 || token >= V) __trap();  // the loader checks tokens; this is a bug upstream
    float value = wte[static_cast<std::size_t>(token) * C + c];
    if (wpe) value += wpe[(i % T) * C + c];
    out[e] = value;
  }
}

// Sort keys: token in the high word, row in the low one, so sorted keys group each token's
// rows in row order. Padding keys (all ones) sort last.
__global__ void embed_keys(std::uint64_t* keys, const std::int32_t* tokens, int N, int V, int padded) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= padded) return;
  if (i < N && (tokens[i] < 0 || tokens[i] >= V)) __trap();
  keys[i] = i < N ? (static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[i])) << 32) | static_cast<std::uint32_t>(i)
                  : ~std::uint64_t{0};
}

// One step (k, j) of a bitonic sort over the whole array, for partner distances j >= kSortTile.
__global__ void bitonic_step(std::uint64_t* keys, int k, int j) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int partner = i ^ j;
  if (partner <= i) return;
  const bool ascending = (i & k) == 0;
  const std::uint64_t a = keys[i], b = keys[partner];
  if ((a > b) == ascending) {
    keys[i] = b;
    keys[partner] = a;
  }
}

constexpr int kSortTile = 1024;  // keys a block sorts in shared memory

// Steps (k, j), (k, j/2), ..., (k, 1) of the bitonic sort on each tile of `tile` keys (j < tile).
__global__ void bitonic_tile(std::uint64_t* keys, int k, int j_first, int tile) {
  __shared__ std::uint64_t s[kSortTile];
  const int base = blockIdx.x * tile;
  const int t = threadIdx.x;
  s[t] = keys[base + t];
  for (int j = j_first; j > 0; j /= 2) {
    __syncthreads();
    const int partner = t ^ j;
    if (partner > t) {
      const bool ascending = ((base + t) & k) == 0;
      const std::uint64_t a = s[t], b = s[partner];
      if ((a > b) == ascending) {
        s[t] = b;
        s[partner] = a;
      }
    }
  }
  __syncthreads();
  keys[base + t] = s[t];
}

// The first sorted position of each token adds that token's rows, in row order, onto dwte.
__global__ void embed_backward_tokens(float* dwte, const float* dout, const std::uint64_t* keys, int N, int C) {
  const int p = blockIdx.x;
  const std::uint32_t token = static_cast<std::uint32_t>(keys[p] >> 32);
  if (p > 0 && static_cast<std::uint32_t>(keys[p - 1] >> 32) == token) return;
  for (int c = blockIdx.y * blockDim.x + threadIdx.x; c < C; c += gridDim.y * blockDim.x) {
    float* dst = dwte + static_cast<std::size_t>(token) * C + c;
    float acc = *dst;
    for (int q = p; q < N && static_cast<std::uint32_t>(keys[q] >> 32) == token; ++q)
      acc += dout[static_cast<std::size_t>(static_cast<std::uint32_t>(keys[q])) * C + c];
    *dst = acc;
  }
}

__global__ void embed_backward_positions(float* dwpe, const float* dout, int B, int T, int C) {
  const std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (e >= static_cast<std::size_t>(T) * C) return;
  const std::size_t t = e / C, c = e % C;
  float acc = dwpe[e];
  for (int b = 0; b < B; ++b) acc += dout[(b * static_cast<std::size_t>(T) + t) * C + c];
  dwpe[e] = acc;
}

int padded_keys(int N) {
  int p = 1;
  while (p < N) p *= 2;
  return p;
}

// ---------------------------------------------------------------------------------------
// Normalizations: one warp per row.

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* x, const float* w,
                                         const float* b, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* xi = x + static_cast<std::size_t>(row) * C;
  float sum = 0.f;
  for (int c = lane; c < C; c += kWarp) sum += xi[c];
  const float m = warp_sum(sum) / C;
  float sq = 0.f;
  for (int c = lane; c < C; c += kWarp) {
    const float d = xi[c] - m;
    sq += d * d;
  }
  const float rs = 1.f / sqrtf(warp_sum(sq) / C + kLnEps);
  float* oi = out + static_cast<std::size_t>(row) * C;
  for (int c = lane; c < C; c += kWarp) oi[c] = (xi[c] - m) * rs * w[c] + b[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

__global__ void layernorm_backward_input_kernel(float* dx, const float* residual, const float* dout, const float* x,
                                                const float* w, const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const std::size_t at = static_cast<std::size_t>(row) * C;
  const float m = mean[row], rs = rstd[row];
  float sum_g = 0.f, sum_gn = 0.f;
  for (int c = lane; c < C; c += kWarp) {
    const float g = dout[at + c] * w[c];
    sum_g += g;
    sum_gn += g * ((x[at + c] - m) * rs);
  }
  const float a = warp_sum(sum_g) / C, bn = warp_sum(sum_gn) / C;
  for (int c = lane; c < C; c += kWarp) {
    const float g = dout[at + c] * w[c];
    const float norm = (x[at + c] - m) * rs;
    float d = rs * (g - a - norm * bn);
    if (residual) d += residual[at + c];  // read before the write: residual may alias dx
    dx[at + c] = d;
  }
}

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* x, const float* w, int N, int C,
                                       float eps) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* xi = x + static_cast<std::size_t>(row) * C;
  float ss = 0.f;
  for (int c = lane; c < C; c += kWarp) ss += xi[c] * xi[c];
  const float r = 1.f / sqrtf(warp_sum(ss) / C + eps);
  float* oi = out + static_cast<std::size_t>(row) * C;
  for (int c = lane; c < C; c += kWarp) oi[c] = xi[c] * r * w[c];
  if (lane == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_input_kernel(float* dx, const float* residual, const float* dout, const float* x,
                                              const float* w, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const std::size_t at = static_cast<std::size_t>(row) * C;
  const float r = rstd[row];
  float dot = 0.f;
  for (int c = lane; c < C; c += kWarp) dot += dout[at + c] * w[c] * x[at + c];
  const float k = r * r * r * warp_sum(dot) / C;
  for (int c = lane; c < C; c += kWarp) {
    float d = r * dout[at + c] * w[c] - k * x[at + c];
    if (residual) d += residual[at + c];
    dx[at + c] = d;
  }
}

// ---------------------------------------------------------------------------------------
// Elementwise

__device__ __forceinline__ float gelu_inner(float x) { return kGeluScale * (x + kGeluCubic * x * x * x); }

__global__ void bias_gelu_forward_kernel(float* pre, float* out, const float* bias, int N, int C) {
  const std::size_t total = static_cast<std::size_t>(N) * C;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float x = pre[e];
    if (bias) x += bias[e % C];
    pre[e] = x;
    out[e] = 0.5f * x * (1.f + tanhf(gelu_inner(x)));
  }
}

__global__ void gelu_backward_kernel(float* d, const float* pre, std::size_t total) {
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float x = pre[e];
    const float t = tanhf(gelu_inner(x));
    const float du = kGeluScale * (3.f * kGeluCubic * x * x + 1.f);
    d[e] *= 0.5f * (1.f + t + x * (1.f - t * t) * du);
  }
}

__global__ void broadcast_rows_kernel(float* out, const float* row, std::size_t total, int C) {
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[e] = row[e % C];
}

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

__global__ void swiglu_forward_kernel(float* act, const float* gate, const float* up, std::size_t n) {
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    act[e] = gate[e] * sigmoid(gate[e]) * up[e];
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dact, const float* gate,
                                       const float* up, std::size_t n) {
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float g = gate[e], s = sigmoid(g), da = dact[e];
    const float u = up[e];  // read both inputs first: dgate or dup may alias one of them
    dup[e] = da * g * s;
    dgate[e] = da * u * s * (1.f + g * (1.f - s));
  }
}

// One thread per rotated pair (row, head, j < hd/2); `transpose` rotates by -angle.
__global__ void rope_kernel(float* x, int N, int heads, int hd, int T, const float* cos, const float* sin,
                            bool transpose) {
  const int half = hd / 2;
  const std::size_t total = static_cast<std::size_t>(N) * heads * half;
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int j = static_cast<int>(e % half);
    const std::size_t head_row = e / half;  // row * heads + head
    const int row = static_cast<int>(head_row / heads);
    const float c = cos[static_cast<std::size_t>(row % T) * half + j];
    const float s = transpose ? -sin[static_cast<std::size_t>(row % T) * half + j]
                              : sin[static_cast<std::size_t>(row % T) * half + j];
    float* v = x + head_row * hd;
    const float a = v[j], b = v[j + half];
    v[j] = a * c - b * s;
    v[j + half] = b * c + a * s;
  }
}

// ---------------------------------------------------------------------------------------
// Sum of squares in double: each block reduces kSquaresPerBlock floats (threads stride, then
// a tree in shared memory), then one block adds the block sums the same way.

__device__ double block_tree_sum(double value) {
  __shared__ double s[kThreads];
  s[threadIdx.x] = value;
  for (int width = kThreads / 2; width > 0; width /= 2) {
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < width) s[threadIdx.x] += s[threadIdx.x + width];
  }
  return s[0];
}

__global__ void square_partials(double* partial, const float* x, std::size_t n) {
  const std::size_t begin = static_cast<std::size_t>(blockIdx.x) * kSquaresPerBlock;
  const std::size_t end = begin + kSquaresPerBlock < n ? begin + kSquaresPerBlock : n;
  double acc = 0.0;
  for (std::size_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const double v = x[i];
    acc += v * v;
  }
  const double total = block_tree_sum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void sum_partials(double* out, const double* partial, std::size_t count) {
  double acc = 0.0;
  for (std::size_t i = threadIdx.x; i < count; i += kThreads) acc += partial[i];
  const double total = block_tree_sum(acc);
  if (threadIdx.x == 0) *out = total;
}

// ---------------------------------------------------------------------------------------
// Cross-entropy: one block per row. Pass 1 gives each thread a running (max, sum of exp) over
// its columns, combined across the block; pass 2 writes the gradient.

constexpr int kCeThreads = 512;

__device__ __forceinline__ void combine(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  s = (m == -INFINITY ? 0.f : s * expf(m - mx)) + (m2 == -INFINITY ? 0.f : s2 * expf(m2 - mx));
  m = mx;
}

__global__ void crossentropy_kernel(float* dlogits, float* losses, float* lse_out, const float* logits,
                                    const std::int32_t* targets, int V, int Vp, float scale) {
  __shared__ float warp_m[kCeThreads / kWarp], warp_s[kCeThreads / kWarp];
  __shared__ float row_lse, target_logit;
  const std::size_t at = static_cast<std::size_t>(blockIdx.x) * Vp;
  const float* l = logits + at;
  const int target = targets[blockIdx.x];
  if (target < 0 || target >= V) __trap();
  float m = -INFINITY, s = 0.f;
  for (int c = threadIdx.x; c < V; c += kCeThreads) {
    const float x = l[c];
    if (x > m) {
      s = s * expf(m - x) + 1.f;  // expf(-inf) = 0 on the first value
      m = x;
    } else {
      s += expf(x - m);
    }
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
    combine(m, s, m2, s2);
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float bm = warp_m[0], bs = warp_s[0];
    for (int w = 1; w < kCeThreads / kWarp; ++w) combine(bm, bs, warp_m[w], warp_s[w]);
    row_lse = bm + logf(bs);
    target_logit = l[target];  // before pass 2 overwrites it when dlogits aliases logits
  }
  __syncthreads();
  const float lse = row_lse;
  if (threadIdx.x == 0) {
    losses[blockIdx.x] = lse - target_logit;
    if (lse_out) lse_out[blockIdx.x] = lse;
  }
  float* d = dlogits + at;
  for (int c = threadIdx.x; c < Vp; c += kCeThreads) {
    const float p = c < V ? expf(l[c] - lse) : 0.f;
    d[c] = c == target ? scale * p - scale : scale * p;
  }
}

// ---------------------------------------------------------------------------------------
// AdamW: optim/adamw_impl.inc's operations one by one, each rounded (no FMA contraction).

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, std::size_t n, AdamWCoefficients k,
                             std::uint16_t* p_bf16) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float grad = __fmul_rn(g[i], k.grad_scale);
    const float mi = __fadd_rn(__fmul_rn(k.beta1, m[i]), __fmul_rn(k.one_minus_beta1, grad));
    const float vi = __fadd_rn(__fmul_rn(k.beta2, v[i]), __fmul_rn(k.one_minus_beta2, __fmul_rn(grad, grad)));
    const float m_hat = __fmul_rn(mi, k.inv_bias_correction1);
    const float v_hat = __fmul_rn(vi, k.inv_bias_correction2);
    const float pi = p[i];
    const float update =
        __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), k.eps)), __fmul_rn(k.weight_decay, pi));
    const float next = __fsub_rn(pi, __fmul_rn(k.lr, update));
    m[i] = mi;
    v[i] = vi;
    p[i] = next;
    if (p_bf16) p_bf16[i] = to_bf16_bits(next);
  }
}

__global__ void to_bf16_kernel(std::uint16_t* dst, const float* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = to_bf16_bits(src[i]);
}

__global__ void from_bf16_kernel(float* dst, const std::uint16_t* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = from_bf16_bits(src[i]);
}

// The sharding engine's elementwise steps, one IEEE operation an element (explicit rounding:
// the host's bits).
__global__ void add_kernel(float* x, const float* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void add_bf16_kernel(float* x, const std::uint16_t* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = __fadd_rn(x[i], from_bf16_bits(y[i]));
}

__global__ void scale_kernel(float* x, std::size_t n, float factor) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = __fmul_rn(x[i], factor);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Launchers

void embed_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, int N, int T, int C,
                   int V, Stream stream) {
  check_rows("embed_forward", N, C);
  require(T > 0 && V > 0, "embed_forward", "T and V must be positive");
  const std::size_t total = static_cast<std::size_t>(N) * C;
  embed_forward_kernel<<<stride_blocks(total, kThreads), kThreads, 0, stream>>>(out, tokens, wte, wpe, N, T, C, V);
  check_launch("embed_forward");
}

std::size_t embed_backward_scratch_bytes(int N, int) {
  return static_cast<std::size_t>(padded_keys(N)) * sizeof(std::uint64_t);
}

void embed_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens, int N, int T, int C,
                    int V, void* scratch, Stream stream) {
  const char* name = "embed_backward";
  check_rows(name, N, C);
  require(T > 0 && N % T == 0, name, "N = " + std::to_string(N) + " is not a multiple of T = " + std::to_string(T));
  require(V > 0, name, "V must be positive");
  require(scratch != nullptr, name, "scratch is null");
  auto* keys = static_cast<std::uint64_t*>(scratch);
  const int padded = padded_keys(N);
  const int tile = padded < kSortTile ? padded : kSortTile;
  embed_keys<<<blocks_for(padded, tile), tile, 0, stream>>>(keys, tokens, N, V, padded);
  check_launch(name);
  for (int k = 2; k <= padded; k *= 2) {
    int j = k / 2;
    for (; j >= tile; j /= 2) bitonic_step<<<padded / tile, tile, 0, stream>>>(keys, k, j);
    bitonic_tile<<<padded / tile, tile, 0, stream>>>(keys, k, j, tile);
  }
  check_launch(name);
  const unsigned column_blocks = blocks_for(C, kThreads) < 65535 ? blocks_for(C, kThreads) : 65535;
  embed_backward_tokens<<<dim3(N, column_blocks), kThreads, 0, stream>>>(dwte, dout, keys, N, C);
  check_launch(name);
  if (dwpe) {
    embed_backward_positions<<<blocks_for(static_cast<std::size_t>(T) * C, kThreads), kThreads, 0, stream>>>(
        dwpe, dout, N / T, T, C);
    check_launch(name);
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* x, const float* w, const float* b, int N,
                       int C, Stream stream) {
  check_rows("layernorm_forward", N, C);
  layernorm_forward_kernel<<<blocks_for(N, kRowsPerBlock), kThreads, 0, stream>>>(out, mean, rstd, x, w, b, N, C);
  check_launch("layernorm_forward");
}

std::size_t norm_backward_scratch_bytes(int N, int C) {
  return 2 * static_cast<std::size_t>(row_chunks(N)) * C * sizeof(float);
}

void layernorm_backward(float* dx, float* dw, float* db, const float* residual, const float* dout, const float* x,
                        const float* w, const float* mean, const float* rstd, int N, int C, void* scratch,
                        Stream stream) {
  const char* name = "layernorm_backward";
  check_rows(name, N, C);
  // The parameter gradients read nothing dx overwrites: dout, x, mean and rstd only.
  reduce_columns(dw, db, LayerNormParamTerms{dout, x, mean, rstd, C}, N, C, scratch, stream, name);
  layernorm_backward_input_kernel<<<blocks_for(N, kRowsPerBlock), kThreads, 0, stream>>>(dx, residual, dout, x, w,
                                                                                         mean, rstd, N, C);
  check_launch(name);
}

void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps,
                     Stream stream) {
  check_rows("rmsnorm_forward", N, C);
  rmsnorm_forward_kernel<<<blocks_for(N, kRowsPerBlock), kThreads, 0, stream>>>(out, rstd, x, w, N, C, eps);
  check_launch("rmsnorm_forward");
}

void rmsnorm_backward(float* dx, float* dw, const float* residual, const float* dout, const float* x,
                      const float* w, const float* rstd, int N, int C, void* scratch, Stream stream) {
  const char* name = "rmsnorm_backward";
  check_rows(name, N, C);
  reduce_columns(dw, nullptr, RmsNormWeightTerm{dout, x, rstd, C}, N, C, scratch, stream, name);
  rmsnorm_backward_input_kernel<<<blocks_for(N, kRowsPerBlock), kThreads, 0, stream>>>(dx, residual, dout, x, w,
                                                                                       rstd, N, C);
  check_launch(name);
}

void bias_gelu_forward(float* pre, float* out, const float* bias, int N, int C, Stream stream) {
  check_rows("bias_gelu_forward", N, C);
  const std::size_t total = static_cast<std::size_t>(N) * C;
  bias_gelu_forward_kernel<<<stride_blocks(total, kThreads), kThreads, 0, stream>>>(pre, out, bias, N, C);
  check_launch("bias_gelu_forward");
}

void gelu_backward(float* d, const float* pre, int N, int C, Stream stream) {
  check_rows("gelu_backward", N, C);
  const std::size_t total = static_cast<std::size_t>(N) * C;
  gelu_backward_kernel<<<stride_blocks(total, kThreads), kThreads, 0, stream>>>(d, pre, total);
  check_launch("gelu_backward");
}

void broadcast_rows(float* out, const float* row, int N, int C, Stream stream) {
  check_rows("broadcast_rows", N, C);
  const std::size_t total = static_cast<std::size_t>(N) * C;
  broadcast_rows_kernel<<<stride_blocks(total, kThreads), kThreads, 0, stream>>>(out, row, total, C);
  check_launch("broadcast_rows");
}

std::size_t column_sums_scratch_bytes(int N, int C) {
  return static_cast<std::size_t>(row_chunks(N)) * C * sizeof(float);
}

void column_sums(float* out, const float* x, int N, int C, int ld, void* scratch, Stream stream) {
  check_rows("column_sums", N, C);
  require(ld >= C, "column_sums", "ld = " + std::to_string(ld) + " is less than C = " + std::to_string(C));
  reduce_columns(out, nullptr, StridedColumn{x, ld}, N, C, scratch, stream, "column_sums");
}

std::size_t sum_squares_scratch_bytes(std::size_t n) {
  return (n + kSquaresPerBlock - 1) / kSquaresPerBlock * sizeof(double);
}

void sum_squares(double* out, const float* x, std::size_t n, void* scratch, Stream stream) {
  require(n > 0, "sum_squares", "n = 0 values");
  require(scratch != nullptr, "sum_squares", "scratch is null");
  const std::size_t blocks = (n + kSquaresPerBlock - 1) / kSquaresPerBlock;
  require(blocks <= 0x7fffffffu, "sum_squares", "n is too large");
  auto* partial = static_cast<double*>(scratch);
  square_partials<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(partial, x, n);
  check_launch("sum_squares");
  sum_partials<<<1, kThreads, 0, stream>>>(out, partial, blocks);
  check_launch("sum_squares");
}

void swiglu_forward(float* act, const float* gate, const float* up, std::size_t n, Stream stream) {
  require(n > 0, "swiglu_forward", "n = 0 values");
  swiglu_forward_kernel<<<stride_blocks(n, kThreads), kThreads, 0, stream>>>(act, gate, up, n);
  check_launch("swiglu_forward");
}

void swiglu_backward(float* dgate, float* dup, const float* dact, const float* gate, const float* up,
                     std::size_t n, Stream stream) {
  require(n > 0, "swiglu_backward", "n = 0 values");
  swiglu_backward_kernel<<<stride_blocks(n, kThreads), kThreads, 0, stream>>>(dgate, dup, dact, gate, up, n);
  check_launch("swiglu_backward");
}

namespace {
void rope(const char* name, float* x, int N, int heads, int hd, int T, const float* cos, const float* sin,
          bool transpose, Stream stream) {
  check_rows(name, N, heads);
  require(hd > 0 && hd % 2 == 0, name, "hd = " + std::to_string(hd) + " must be positive and even");
  require(T > 0, name, "T must be positive");
  const std::size_t total = static_cast<std::size_t>(N) * heads * (hd / 2);
  rope_kernel<<<stride_blocks(total, kThreads), kThreads, 0, stream>>>(x, N, heads, hd, T, cos, sin, transpose);
  check_launch(name);
}
}  // namespace

void rope_forward(float* x, int N, int heads, int hd, int T, const float* cos, const float* sin, Stream stream) {
  rope("rope_forward", x, N, heads, hd, T, cos, sin, false, stream);
}

void rope_backward(float* dx, int N, int heads, int hd, int T, const float* cos, const float* sin, Stream stream) {
  rope("rope_backward", dx, N, heads, hd, T, cos, sin, true, stream);
}

void crossentropy_fused(float* dlogits, float* losses, float* lse, const float* logits,
                        const std::int32_t* targets, int N, int V, int Vp, float scale, Stream stream) {
  const char* name = "crossentropy_fused";
  check_rows(name, N, V);
  require(Vp >= V, name, "Vp = " + std::to_string(Vp) + " is less than V = " + std::to_string(V));
  crossentropy_kernel<<<N, kCeThreads, 0, stream>>>(dlogits, losses, lse, logits, targets, V, Vp, scale);
  check_launch(name);
}

namespace {
// Launches the grid-stride `kernel` over n values with `args` (none: nothing to launch); errors
// name `launcher`.
template <class... Params, class... Args>
void launch_stride(const char* launcher, void (*kernel)(Params...), std::size_t n, Stream stream, Args... args) {
  if (n == 0) return;
  kernel<<<stride_blocks(n, kThreads), kThreads, 0, stream>>>(args...);
  check_launch(launcher);
}
}  // namespace

void adamw_update(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
                  const AdamWCoefficients& c, std::uint16_t* params_bf16, Stream stream) {
  launch_stride("adamw_update", adamw_kernel, n, stream, params, grads, exp_avg, exp_avg_sq, n, c, params_bf16);
}

void cast_f32_to_bf16(std::uint16_t* dst, const float* src, std::size_t n, Stream stream) {
  launch_stride("cast_f32_to_bf16", to_bf16_kernel, n, stream, dst, src, n);
}

void cast_bf16_to_f32(float* dst, const std::uint16_t* src, std::size_t n, Stream stream) {
  launch_stride("cast_bf16_to_f32", from_bf16_kernel, n, stream, dst, src, n);
}

void add(float* x, const float* y, std::size_t n, Stream stream) {
  launch_stride("add", add_kernel, n, stream, x, y, n);
}

void add_bf16(float* x, const std::uint16_t* y, std::size_t n, Stream stream) {
  launch_stride("add_bf16", add_bf16_kernel, n, stream, x, y, n);
}

void scale(float* x, std::size_t n, float factor, Stream stream) {
  launch_stride("scale", scale_kernel, n, stream, x, n, factor);
}

}  // namespace strata::device::cuda
