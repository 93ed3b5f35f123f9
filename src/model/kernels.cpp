#include "model/kernels.hpp"

#include <cblas.h>

#include <algorithm>

namespace strata::model {

STRATA_ISA_TABLES(Kernels)

const Kernels& kernels_for(Isa isa) {
  return pick_for_isa("model", isa, isa_scalar::table, isa_avx2::table, isa_avx512::table);
}

Range share(int n, int parts, int part, int align) {
  const int units = (n + align - 1) / align;
  const int base = units / parts, extra = units % parts;
  const int begin = part * base + std::min(part, extra);
  const int end = begin + base + (part < extra ? 1 : 0);
  return {std::min(n, begin * align), std::min(n, end * align)};
}

void matmul_forward(float* y, const float* x, const float* w, int in, int out, bool accumulate, Range rows) {
  if (rows.size() <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows.size(), out, in, 1.f,
              x + static_cast<std::size_t>(rows.begin) * in, in, w, in, accumulate ? 1.f : 0.f,
              y + static_cast<std::size_t>(rows.begin) * out, out);
}

void matmul_backward_input(float* dx, const float* dy, int ld_dy, const float* w, int in, int out, Range rows) {
  if (rows.size() <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows.size(), in, out, 1.f,
              dy + static_cast<std::size_t>(rows.begin) * ld_dy, ld_dy, w, in, 0.f,
              dx + static_cast<std::size_t>(rows.begin) * in, in);
}

void matmul_backward_weight(float* dw, const float* dy, int ld_dy, const float* x, int N, int in, Range out_rows) {
  if (out_rows.size() <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_rows.size(), in, N, 1.f, dy + out_rows.begin, ld_dy, x,
              in, 1.f, dw + static_cast<std::size_t>(out_rows.begin) * in, in);
}

}  // namespace strata::model
