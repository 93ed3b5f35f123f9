#include "device/cuda/matmul.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <fmt/format.h>

#include "base/error.hpp"

namespace strata::device::cuda {

namespace {

// cuBLASLt is opened on first use, not linked: its static initialisation costs every strata
// process about a second and 200 MB of memory (measured: `strata --help` 0.07 s -> 0.95 s),
// which CPU runs, and every rank of them, would pay for a GPU they do not use.
void* cublaslt_library() {
  static void* const library = [] {
    void* l = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!l) l = dlopen("libcublasLt.so", RTLD_NOW | RTLD_LOCAL);
    if (!l) throw Error(fmt::format("cuda: cannot open cuBLASLt (libcublasLt.so.13): {}", dlerror()));
    return l;
  }();
  return library;
}

template <class F>
F* cublaslt_symbol(const char* name) {
  void* symbol = dlsym(cublaslt_library(), name);
  if (!symbol) throw Error(fmt::format("cuda: cuBLASLt has no {}", name));
  return reinterpret_cast<F*>(symbol);
}

}  // namespace

// The cuBLASLt function `fn`, looked up once.
#define STRATA_CUBLASLT(fn)                                                      \
  (*[] {                                                                         \
    static auto* const f = cublaslt_symbol<decltype(::fn)>(#fn);                 \
    return f;                                                                    \
  }())

namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(fmt::format("cuBLASLt: {}: {}", what, STRATA_CUBLASLT(cublasLtGetStatusString)(status)));
}

cublasLtHandle_t as_handle(void* h) { return static_cast<cublasLtHandle_t>(h); }

// Elements from a stored matrix's first to its last (column-major, leading dimension ld).
std::size_t span(int rows, int cols, int ld) {
  return static_cast<std::size_t>(ld) * static_cast<std::size_t>(cols - 1) + static_cast<std::size_t>(rows);
}

}  // namespace

struct Matmul::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) STRATA_CUBLASLT(cublasLtMatrixLayoutDestroy)(a);
    if (b) STRATA_CUBLASLT(cublasLtMatrixLayoutDestroy)(b);
    if (c) STRATA_CUBLASLT(cublasLtMatrixLayoutDestroy)(c);
    if (desc) STRATA_CUBLASLT(cublasLtMatmulDescDestroy)(desc);
  }
};

std::uint64_t Matmul::device_bytes(Precision precision, std::size_t max_operand_elements) {
  std::uint64_t bytes = pool_bytes(kWorkspaceBytes);
  if (precision == Precision::BF16) bytes += 2 * pool_bytes(max_operand_elements * sizeof(std::uint16_t));
  return bytes;
}

Matmul::Matmul(Device& device, Precision precision, std::size_t max_operand_elements, Stream stream)
    : precision_(precision),
      max_operand_(max_operand_elements),
      stream_(stream),
      workspace_(device, kWorkspaceBytes),
      bf16_a_(device),
      bf16_b_(device) {
  if (precision_ == Precision::BF16) {
    bf16_a_.resize(max_operand_);
    bf16_b_.resize(max_operand_);
  }
  cublasLtHandle_t h = nullptr;
  check(STRATA_CUBLASLT(cublasLtCreate)(&h), "create");
  handle_ = h;
}

Matmul::~Matmul() {
  plans_.clear();
  if (handle_) STRATA_CUBLASLT(cublasLtDestroy)(as_handle(handle_));
}

const Matmul::Plan& Matmul::plan_for(bool transpose_a, bool transpose_b, int m, int n, int k, int lda, int ldb,
                                     int ldc, bool accumulate) {
  const Shape key{transpose_a, transpose_b, m, n, k, lda, ldb, ldc, accumulate};
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t in_type = precision_ == Precision::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  // CUBLAS_COMPUTE_32F is strict fp32 (TF32 would need the _FAST_TF32 variant): fp32 mode
  // multiplies as the CPU does; bf16 mode accumulates in fp32.
  check(STRATA_CUBLASLT(cublasLtMatmulDescCreate)(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(STRATA_CUBLASLT(cublasLtMatmulDescSetAttribute)(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), "transa");
  check(STRATA_CUBLASLT(cublasLtMatmulDescSetAttribute)(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "transb");
  check(STRATA_CUBLASLT(cublasLtMatrixLayoutCreate)(&plan->a, in_type, transpose_a ? k : m, transpose_a ? m : k, lda), "layout A");
  check(STRATA_CUBLASLT(cublasLtMatrixLayoutCreate)(&plan->b, in_type, transpose_b ? n : k, transpose_b ? k : n, ldb), "layout B");
  check(STRATA_CUBLASLT(cublasLtMatrixLayoutCreate)(&plan->c, CUDA_R_32F, m, n, ldc), "layout C");

  cublasLtMatmulPreference_t pref = nullptr;
  check(STRATA_CUBLASLT(cublasLtMatmulPreferenceCreate)(&pref), "preference");
  const std::uint64_t workspace = kWorkspaceBytes;
  // Our tensors start on 64-byte boundaries (model/layout.hpp), not cuBLASLt's assumed 256.
  const std::uint32_t alignment = 16;
  // No in-place split-K reduction: its order of additions may vary, and same seed must give
  // the same losses.
  const std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = STRATA_CUBLASLT(cublasLtMatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace, sizeof(workspace));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (status == CUBLAS_STATUS_SUCCESS)
      status = STRATA_CUBLASLT(cublasLtMatmulPreferenceSetAttribute)(pref, attr, &alignment, sizeof(alignment));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = STRATA_CUBLASLT(cublasLtMatmulPreferenceSetAttribute)(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                  sizeof(reductions));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = STRATA_CUBLASLT(cublasLtMatmulAlgoGetHeuristic)(as_handle(handle_), plan->desc, plan->a, plan->b, plan->c, plan->c, pref,
                                            1, &result, &found);
  STRATA_CUBLASLT(cublasLtMatmulPreferenceDestroy)(pref);
  check(status, "algorithm heuristic");
  if (found == 0)
    throw Error(fmt::format("cuBLASLt: no algorithm for a {} product m={} n={} k={} (op A {}, op B {})",
                            precision_name(precision_), m, n, k, transpose_a ? "T" : "N", transpose_b ? "T" : "N"));
  plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

const void* Matmul::operand(const float* x, int rows, int cols, int ld, Buffer<std::uint16_t>& scratch) {
  if (precision_ == Precision::F32) return x;
  const std::size_t n = span(rows, cols, ld);
  if (n > max_operand_)
    throw Error(fmt::format("cuda matmul: an operand of {} elements exceeds the {} it was sized for", n, max_operand_));
  cast_f32_to_bf16(scratch.data(), x, n, stream_);
  return scratch.data();
}

void Matmul::gemm(bool transpose_a, bool transpose_b, int m, int n, int k, const float* a, int lda, const float* b,
                  int ldb, float* c, int ldc, float beta) {
  const Plan& plan = plan_for(transpose_a, transpose_b, m, n, k, lda, ldb, ldc, beta != 0.0f);
  const void* a_in = operand(a, transpose_a ? k : m, transpose_a ? m : k, lda, bf16_a_);
  const void* b_in = operand(b, transpose_b ? n : k, transpose_b ? k : n, ldb, bf16_b_);
  const float alpha = 1.0f;
  check(STRATA_CUBLASLT(cublasLtMatmul)(as_handle(handle_), plan.desc, &alpha, a_in, plan.a, b_in, plan.b, &beta, c, plan.c, c,
                       plan.c, &plan.algo, workspace_.data(), kWorkspaceBytes, reinterpret_cast<cudaStream_t>(stream_)),
        "matmul");
}

// Row-major [r, c] with leading dimension c is column-major [c, r]: each product below is its
// transpose in column-major terms (y^T = W x^T, and so on).
void Matmul::forward(float* y, const float* x, const float* w, int N, int in, int out, bool accumulate) {
  gemm(true, false, out, N, in, w, in, x, in, y, out, accumulate ? 1.0f : 0.0f);
}

void Matmul::backward_input(float* dx, const float* dy, int ld_dy, const float* w, int N, int in, int out,
                            bool accumulate) {
  gemm(false, false, in, N, out, w, in, dy, ld_dy, dx, in, accumulate ? 1.0f : 0.0f);
}

void Matmul::backward_weight(float* dw, const float* dy, int ld_dy, const float* x, int N, int in, int out) {
  gemm(false, true, in, out, N, x, in, dy, ld_dy, dw, in, 1.0f);
}

}  // namespace strata::device::cuda
