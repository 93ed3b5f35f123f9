// The translation unit that builds the tests' shared precompiled header (tests/CMakeLists.txt,
// strata_test_pch); it has no code of its own.
