#include "device/device.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "base/aligned.hpp"
#include "base/cpu.hpp"
#include "base/error.hpp"

namespace strata::device {

namespace {

class HostDevice final : public Device {
 public:
  std::string_view name() const override { return "cpu"; }
  void* allocate(std::size_t bytes) override { return aligned_zeroed(bytes); }
  void deallocate(void* memory) noexcept override { std::free(memory); }
  void zero(void* memory, std::size_t bytes) override { std::memset(memory, 0, bytes); }
  const model::Kernels& kernels() const override { return model::kernels_for(detected_isa()); }
};

}  // namespace

Device& host() {
  static HostDevice device;
  return device;
}

Device& device_named(std::string_view name, std::string_view field) {
  if (name == host().name()) return host();
  throw Error(fmt::format("{} = '{}': no backend for that device (known: cpu)", field, name));
}

}  // namespace strata::device
