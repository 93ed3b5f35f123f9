#pragma once
// An enum's names for flags and output, one table each: a value's name, a name's value, and
// the list a refusal gives.
#include <cstddef>
#include <string_view>
#include <vector>

namespace strata::plan {

template <class E>
struct Named {
  E value;
  std::string_view name;
};

template <class E, std::size_t N>
std::string_view name_of(const Named<E> (&table)[N], E value) {
  for (const Named<E>& n : table)
    if (n.value == value) return n.name;
  return "?";
}

template <class E, std::size_t N>
const E* value_of(const Named<E> (&table)[N], std::string_view name) {  // nullptr: not in the table
  for (const Named<E>& n : table)
    if (n.name == name) return &n.value;
  return nullptr;
}

template <class E, std::size_t N>
std::vector<std::string_view> names_of(const Named<E> (&table)[N]) {
  std::vector<std::string_view> out;
  for (const Named<E>& n : table) out.push_back(n.name);
  return out;
}

}  // namespace strata::plan
