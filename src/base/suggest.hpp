#pragma once
// "Did you mean ...": the known names nearest to a mistyped one, for every refusal of an
// unknown name (commands, flags, config keys).
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// Edits (insert, delete, substitute, swap two neighbours) that turn a into b: the optimal
// string alignment form of the Damerau-Levenshtein distance, so "trian" is 1 from "train".
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  // Three rows: two back for the swap, one back for the rest.
  std::vector<std::size_t> before(m + 1), prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

// The candidates nearest to `name`, in their given order, when near enough to be a typo: at
// most a third of the longer name's letters edited, at least one ("--step" of "--steps").
// Empty when nothing is that near.
inline std::vector<std::string> nearest_names(std::string_view name, const std::vector<std::string>& candidates) {
  std::vector<std::string> best;
  std::size_t best_distance = 0;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(name, c);
    const std::size_t limit = std::max<std::size_t>(1, std::max(name.size(), c.size()) / 3);
    if (d > limit) continue;
    if (best.empty() || d < best_distance) {
      best = {c};
      best_distance = d;
    } else if (d == best_distance) {
      best.push_back(c);
    }
  }
  return best;
}

// " (did you mean 'train'?)", " (did you mean --steps or --seed?)" or "" when none is near;
// `quote` wraps each name ("'" for commands and keys, "" for flags).
inline std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates,
                                std::string_view quote = "'") {
  const std::vector<std::string> near = nearest_names(name, candidates);
  if (near.empty()) return "";
  std::string text = " (did you mean ";
  for (std::size_t i = 0; i < near.size(); ++i) {
    if (i > 0) text += i + 1 == near.size() ? " or " : ", ";
    text.append(quote).append(near[i]).append(quote);
  }
  return text + "?)";
}

}  // namespace strata
