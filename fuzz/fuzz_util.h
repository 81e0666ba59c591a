// Helpers shared by the fuzz targets: fixture paths (as the tests find them), a scratch folder for
// inputs that the code under test only reads from files, and the check that turns a broken
// invariant into a finding.
#ifndef ATTNSCOPE_FUZZ_FUZZ_UTIL_H_
#define ATTNSCOPE_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnscope::fuzz {

// The shared fixtures folder: ATTNSCOPE_SHARED_DIR, else the one this build was configured with.
std::string SharedDir();
// tests/data of this checkout.
std::string TestDataDir();

// The whole file; exits the process naming the path when it cannot be read (a missing fixture is a
// setup error, not a finding).
std::string ReadFixture(const std::string& path);

// A folder of this process's own, made on first use and removed at exit.
const std::string& ScratchDir();
// Writes `bytes` to `path`, replacing it; aborts when it cannot (the disk, not the code under
// test).
void WriteFile(const std::string& path, std::string_view bytes);

// The fuzzer's input as text.
inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

// Prints `what` and the location, then aborts, so that libFuzzer saves the input as a crash: for
// invariants the sanitizers cannot see (an offset outside the text, an id outside the vocabulary).
[[noreturn]] void Fail(const char* file, int line, const std::string& what);

}  // namespace attnscope::fuzz

#define ATTNSCOPE_FUZZ_CHECK(condition, what)                            \
  do {                                                                   \
    if (!(condition)) ::attnscope::fuzz::Fail(__FILE__, __LINE__, what); \
  } while (false)

#endif  // ATTNSCOPE_FUZZ_FUZZ_UTIL_H_
