#include "fuzz/fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace attnscope::fuzz {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

void RemoveScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(ScratchDir(), ignored);
}

}  // namespace

std::string SharedDir() { return EnvOr("ATTNSCOPE_SHARED_DIR", ATTNSCOPE_DEFAULT_SHARED_DIR); }

std::string TestDataDir() { return ATTNSCOPE_DEFAULT_TEST_DATA; }

std::string ReadFixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr,
                 "fuzz fixture '%s': expected a readable file, got none (set "
                 "ATTNSCOPE_SHARED_DIR to the shared fixtures folder)\n",
                 path.c_str());
    std::exit(2);
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

const std::string& ScratchDir() {
  static const std::string* const dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "attnscope_fuzz_XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror(pattern.c_str());
      std::abort();
    }
    auto* made = new std::string(pattern);
    std::atexit(RemoveScratchDir);
    return made;
  }();
  return *dir;
}

void WriteFile(const std::string& path, std::string_view bytes) {
  // A new file rather than the old one truncated: ext4 flushes a file rewritten in place to disk
  // when it is closed (auto_da_alloc), 3 ms a write on this machine against 40 us.
  std::remove(path.c_str());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::perror(path.c_str());
    std::abort();
  }
}

void Fail(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what.c_str());
  std::abort();
}

}  // namespace attnscope::fuzz
