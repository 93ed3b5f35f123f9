#include "model/kernels.hpp"

#include <cblas.h>

#include <string>

#include "base/error.hpp"

namespace strata::model {

namespace isa_scalar {
const Kernels& table();
}
namespace isa_avx2 {
const Kernels& table();
}
namespace isa_avx512 {
const Kernels& table();
}

const Kernels& kernels_for(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(detected_isa()))
    throw Error("model: kernels for " + std::string(isa_name(isa)) + " requested, but only " +
                std::string(isa_name(detected_isa())) + " is available");
  switch (isa) {
    case Isa::Avx512: return isa_avx512::table();
    case Isa::Avx2: return isa_avx2::table();
    case Isa::Scalar: break;
  }
  return isa_scalar::table();
}

std::size_t attention_scratch_floats(int T, int max_threads) {
  return static_cast<std::size_t>(T) * T * static_cast<std::size_t>(max_threads);
}

void matmul_forward(float* y, const float* x, const float* w, int N, int in, int out, bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1.f, x, in, w, in, accumulate ? 1.f : 0.f, y,
              out);
}

void matmul_backward_input(float* dx, const float* dy, int ld_dy, const float* w, int N, int in, int out) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1.f, dy, ld_dy, w, in, 0.f, dx, in);
}

void matmul_backward_weight(float* dw, const float* dy, int ld_dy, const float* x, int N, int in, int out) {
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1.f, dy, ld_dy, x, in, 1.f, dw, in);
}

}  // namespace strata::model
