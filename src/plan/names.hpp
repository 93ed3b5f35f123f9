#pragma once
// An enum's names for flags and output, one table each: a value's name, a name's value, and
// the list a refusal gives. A table's rows are Named, or rows of more facts with the same
// `value` and `name`.
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace strata::plan {

template <class E>
struct Named {
  E value;
  std::string_view name;
};

template <class Row, std::size_t N>
std::string_view name_of(const Row (&table)[N], decltype(Row::value) value) {
  for (const Row& n : table)
    if (n.value == value) return n.name;
  return "?";
}

template <class Row, std::size_t N>
const Row& row_of(const Row (&table)[N], decltype(Row::value) value) {  // every value has its row
  const Row* row = std::find_if(std::begin(table), std::end(table), [&](const Row& n) { return n.value == value; });
  if (row == std::end(table)) throw Error("plan: a value without its row in its names table");
  return *row;
}

template <class Row, std::size_t N>
const decltype(Row::value)* value_of(const Row (&table)[N], std::string_view name) {  // nullptr: not in the table
  for (const Row& n : table)
    if (n.name == name) return &n.value;
  return nullptr;
}

template <class Row, std::size_t N>
std::vector<std::string_view> names_of(const Row (&table)[N]) {
  std::vector<std::string_view> out;
  for (const Row& n : table) out.push_back(n.name);
  return out;
}

}  // namespace strata::plan
