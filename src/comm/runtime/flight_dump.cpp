// The train.flight_dump setting, apart from the recorder: the config reads it without the
// recorder's dependencies (the config fuzzer links this file alone).
#include <fmt/format.h>
#include "base/error.hpp"
#include "comm/runtime/flight.hpp"

namespace strata::comm {

FlightDump parse_flight_dump(std::string_view text) {
  if (text == "on-fault") return FlightDump::OnFault;
  if (text == "always") return FlightDump::Always;
  throw Error(fmt::format("train.flight_dump = '{}': must be on-fault (a timeout, a fatal error, SIGUSR2) or always "
                          "(also at exit)",
                          text));
}

}  // namespace strata::comm
