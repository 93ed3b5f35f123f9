#include "device/cuda/cuda_device.hpp"

#include <cuda_runtime.h>

#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"
#include "device/cuda/cuda_model.hpp"

namespace strata::device::cuda {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(fmt::format("cuda: {}: {}", what, cudaGetErrorString(e)));
}

// The local rank choose_gpu recorded, and the GPU the device was made on (-1: not yet).
int chosen_local_rank = 0;
int made_on_gpu = -1;

// local rank % GPUs; GPU 0 where none answers (gpu_present then says why).
int chosen_gpu() {
  const int count = gpu_count();
  return count == 0 ? 0 : chosen_local_rank % count;
}

// GPU memory as a pool: reserve() takes it with one cudaMalloc, allocations are carved from it
// in order, and it starts over once every buffer is given back (an engine holds its buffers
// for its whole life, so a run allocates once, before its first step).
class CudaDevice final : public Device {
 public:
  CudaDevice() : gpu_(chosen_gpu()) {
    check(cudaSetDevice(gpu_), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "stream");
    made_on_gpu = gpu_;
  }
  // The process ends with the device (a function-local static): the driver frees its memory.
  ~CudaDevice() override = default;

  std::string_view name() const override { return "cuda"; }
  bool host_visible() const override { return false; }

  void reserve(std::size_t bytes) override {
    if (!chunks_.empty() && chunks_.back().capacity - chunks_.back().used >= bytes) return;
    // Nothing held: one chunk of the new size replaces the old ones. Buffers held (a second
    // engine beside a first): a chunk of its own.
    if (live_ == 0) release_chunks();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      std::size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw Error(fmt::format("cuda: a pool of {:.2f} GB for this run does not fit: {:.2f} of {:.2f} GB free ({})",
                              bytes / 1e9, free / 1e9, total / 1e9, cudaGetErrorString(e)));
    }
    chunks_.push_back({static_cast<std::byte*>(p), bytes, 0});
  }

  void* allocate(std::size_t bytes) override {
    const std::size_t rounded = pool_bytes(bytes);
    Chunk* chunk = chunks_.empty() ? nullptr : &chunks_.back();
    if (!chunk || chunk->used + rounded > chunk->capacity)
      throw Error(fmt::format("cuda: {} bytes asked of a pool with {} left: the pool was sized (reserve) without "
                              "this buffer",
                              rounded, chunk ? chunk->capacity - chunk->used : 0));
    void* p = chunk->base + chunk->used;
    chunk->used += rounded;
    ++live_;
    zero(p, rounded);
    return p;
  }
  void deallocate(void*) noexcept override {
    if (--live_ == 0)
      for (Chunk& c : chunks_) c.used = 0;
  }
  void zero(void* memory, std::size_t bytes) override {
    check(cudaMemsetAsync(memory, 0, bytes, stream_), "cudaMemsetAsync");
  }
  const model::Kernels& kernels() const override {
    throw Error("cuda: the cpu kernel table does not run on the GPU; its model comes from make_model()");
  }

  void to_host(void* host, const void* memory, std::size_t bytes) override {
    check(cudaMemcpyAsync(host, memory, bytes, cudaMemcpyDeviceToHost, stream_), "copy to host");
    synchronize("copy to host");
  }
  void from_host(void* memory, const void* host, std::size_t bytes) override {
    check(cudaMemcpyAsync(memory, host, bytes, cudaMemcpyHostToDevice, stream_), "copy from host");
    synchronize("copy from host");
  }

  std::unique_ptr<model::Model> make_model(const model::ModelConfig& config, int batch, int seq, bool recompute,
                                           Precision precision) override {
    if (config.family == model::Family::Llama) return make_cuda_llama(*this, config, batch, seq, recompute, precision);
    return make_cuda_gpt(*this, config, batch, seq, recompute, precision);
  }
  std::uint64_t model_bytes(const model::ModelConfig& config, int batch, int seq, bool recompute,
                            Precision precision) const override {
    const ModelSizes sizes = config.family == model::Family::Llama ? cuda_llama_sizes(config, batch, seq, recompute)
                                                                  : cuda_gpt_sizes(config, batch, seq, recompute);
    return ModelBuffers::device_bytes(sizes, precision);
  }

  double sum_squares(const float* x, std::size_t n) override {
    // Its scratch (a few bytes per block of the arena) is taken on the first step, outside
    // the pool, and kept: the pool holds only what engines and models own.
    const std::size_t need = kPoolAlignBytes + sum_squares_scratch_bytes(n);
    if (need > norm_scratch_bytes_) {
      if (norm_scratch_) check(cudaFree(norm_scratch_), "cudaFree");
      norm_scratch_ = nullptr;
      check(cudaMalloc(&norm_scratch_, need), "cudaMalloc (gradient norm scratch)");
      norm_scratch_bytes_ = need;
    }
    // The result first, the kernel's scratch on the next 256-byte boundary.
    double* result = static_cast<double*>(norm_scratch_);
    cuda::sum_squares(result, x, n, static_cast<std::byte*>(norm_scratch_) + kPoolAlignBytes, stream_);
    double out = 0;
    to_host(&out, result, sizeof(out));
    return out;
  }

  void adamw_update_range(const model::ParamLayout& layout, std::size_t begin, std::size_t end, float* params,
                          const float* grads, float* exp_avg, float* exp_avg_sq, const optim::AdamWConfig& hp,
                          float lr, std::int64_t step, float grad_scale) override {
    if (begin > end) throw Error(fmt::format("adamw: range [{}, {}) ends before it begins", begin, end));
    const AdamWCoefficients decay = optim::adamw_coefficients(hp, lr, hp.weight_decay, step, grad_scale);
    const AdamWCoefficients no_decay = optim::adamw_coefficients(hp, lr, 0.0f, step, grad_scale);
    for (const model::DecaySegment& seg : layout.decay_segments(begin, end)) {
      const std::size_t at = seg.begin - begin;
      cuda::adamw_update(params + at, grads + at, exp_avg + at, exp_avg_sq + at, seg.end - seg.begin,
                         seg.decay ? decay : no_decay, nullptr, stream_);
    }
  }

  // Within the pool (or host memory the driver knows): ordered on the stream like the kernels.
  void copy(void* dst, const void* src, std::size_t bytes) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync (device copy)");
  }
  void add(float* x, const float* y, std::size_t n) override { cuda::add(x, y, n, stream_); }
  void scale(float* x, std::size_t n, float factor) override { cuda::scale(x, n, factor, stream_); }

  void to_half(DType format, const float* src, std::size_t n, std::uint16_t* dst) override {
    require_codec(format);
    cast_f32_to_bf16(dst, src, n, stream_);
  }
  void from_half(DType format, const std::uint16_t* src, std::size_t n, float* dst) override {
    require_codec(format);
    cast_bf16_to_f32(dst, src, n, stream_);
  }
  void from_half_add(DType format, const std::uint16_t* src, std::size_t n, float* dst) override {
    require_codec(format);
    add_bf16(dst, src, n, stream_);
  }
  void quantize(const float* src, std::size_t n, const quant::QuantSpec& spec, std::uint8_t* data,
                float* scales) override {
    // The CPU refuses a block with NaN or infinity, naming it; the kernel reports the first
    // such block through device memory, read back here (a synchronisation per call).
    if (!nonfinite_block_)
      check(cudaMalloc(reinterpret_cast<void**>(&nonfinite_block_), sizeof(std::uint64_t)),
            "cudaMalloc (quantize's non-finite flag)");
    check(cudaMemsetAsync(nonfinite_block_, 0xff, sizeof(std::uint64_t), stream_), "cudaMemsetAsync");
    cuda::quantize(data, scales, src, n, spec, nonfinite_block_, stream_);
    std::uint64_t first = 0;
    to_host(&first, nonfinite_block_, sizeof(first));
    if (first != ~std::uint64_t{0})
      throw Error(fmt::format("quantize: block {} holds NaN or infinity", first));
  }
  void dequantize(const std::uint8_t* data, const float* scales, std::size_t n, const quant::QuantSpec& spec,
                  float* dst) override {
    cuda::dequantize(dst, data, scales, n, spec, stream_);
  }
  void dequantize_add(const std::uint8_t* data, const float* scales, std::size_t n, const quant::QuantSpec& spec,
                      float* dst) override {
    cuda::dequantize_sum(dst, data, 0, scales, 0, 1, n, spec, stream_);
  }

  Stream stream() const { return stream_; }
  int gpu_index() const { return gpu_; }

 private:
  int gpu_;
  cudaStream_t stream_ = nullptr;
  struct Chunk {
    std::byte* base;
    std::size_t capacity, used;
  };
  void release_chunks() {
    for (Chunk& c : chunks_) check(cudaFree(c.base), "cudaFree");
    chunks_.clear();
  }
  std::vector<Chunk> chunks_;  // cudaMalloc'd once each by reserve(); allocations carve the last
  std::size_t live_ = 0;
  void* norm_scratch_ = nullptr;
  std::size_t norm_scratch_bytes_ = 0;
  std::uint64_t* nonfinite_block_ = nullptr;  // 8 bytes outside the pool, as the norm's scratch

  // strata train refuses such a wire before the device is made; this guards every other caller.
  void require_codec(DType format) const {
    if (!is_half(format)) throw Error(fmt::format("cuda: {} is not a 16-bit float format", dtype_name(format)));
    if (!has_codec(name(), format))
      throw Error("cuda: an fp16 wire has no GPU kernel; choose bf16, int8 or int4 (--weight-wire, --grad-wire, "
                  "--step-grad-wire)");
  }
};

CudaDevice& the_device() {
  static CudaDevice device;
  return device;
}

}  // namespace

int gpu_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

void choose_gpu(int local_rank) {
  if (local_rank < 0) throw Error(fmt::format("cuda: local rank {}: must be >= 0", local_rank));
  const int before = chosen_local_rank;
  chosen_local_rank = local_rank;
  if (made_on_gpu < 0) return;  // no CUDA call before the device is made
  const int wanted = chosen_gpu();
  if (wanted == made_on_gpu) return;
  chosen_local_rank = before;
  throw Error(fmt::format("cuda: local rank {} computes on GPU {}, but this process's cuda device was made on GPU {} "
                          "already: the GPU is chosen before the first use of --device cuda",
                          local_rank, wanted, made_on_gpu));
}

bool gpu_present(std::string* why_not) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  std::string why;
  if (e != cudaSuccess) {
    why = fmt::format("no usable GPU here (cudaGetDeviceCount: {})", cudaGetErrorString(e));
  } else if (count == 0) {
    why = "no GPU on this machine";
  } else {
    const int gpu = chosen_gpu();
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, gpu), "cudaGetDeviceProperties");
    if (prop.major < 8)
      why = fmt::format("GPU {} ({}) is sm_{}{}; strata's CUDA code is built for sm_80 and sm_90", gpu, prop.name,
                        prop.major, prop.minor);
  }
  if (why_not) *why_not = why;
  return why.empty();
}

Device& gpu() { return the_device(); }
Stream gpu_stream() { return the_device().stream(); }
void use_gpu_on_this_thread() { check(cudaSetDevice(the_device().gpu_index()), "cudaSetDevice"); }

void synchronize(const char* what) {
  check(cudaGetLastError(), what);
  check(cudaStreamSynchronize(the_device().stream()), what);
}

}  // namespace strata::device::cuda
