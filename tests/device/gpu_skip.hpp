#pragma once
// Every `gpu` test starts here: on a machine or build without a usable GPU it reports itself
// skipped, saying why, never passed.
#include <gtest/gtest.h>

#include <string>

#include "device/device.hpp"

#define STRATA_REQUIRE_GPU()                                                  \
  do {                                                                        \
    std::string strata_why_no_gpu;                                            \
    if (!strata::device::cuda_available(&strata_why_no_gpu))                  \
      GTEST_SKIP() << "needs a GPU: " << strata_why_no_gpu;                   \
  } while (0)
