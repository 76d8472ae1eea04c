// The owner of the tests' precompiled header (tests/CMakeLists.txt): a test
// executable with no test, so the header is built with the tests' flags.
