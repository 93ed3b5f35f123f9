#pragma once
// One exception type for every refusal strata makes. Messages name the file or field and
// what is wrong with it, e.g. "config: model.n_head = 5 does not divide n_embd = 64".
#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// An Error every rank of a job throws alike (after agreeing on it): one rank reporting it
// is enough.
class AgreedError : public Error {
 public:
  explicit AgreedError(const std::string& what) : Error(what) {}
};

}  // namespace strata
