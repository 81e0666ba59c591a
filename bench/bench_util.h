// Timing and flag helpers shared by the benchmark tools.
#ifndef ATTNSCOPE_BENCH_BENCH_UTIL_H_
#define ATTNSCOPE_BENCH_BENCH_UTIL_H_

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace attnscope::bench {

inline double Seconds(std::chrono::steady_clock::duration duration) {
  return std::chrono::duration<double>(duration).count();
}

// The CPU's model name from /proc/cpuinfo: every figure names the CPU it was measured on.
inline std::string CpuName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

inline double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// A flag of a benchmark tool: its line in --help and a setter that takes a value or says what is
// wrong with it (an empty string when the value is taken).
struct Flag {
  std::string help;
  std::function<std::string(const std::string&)> set;
};

// A flag whose value is an integer in [min, max]; anything else (text, a fraction, out of range)
// is refused rather than read as 0 the way atoi would.
template <typename T>
Flag IntFlag(T* target, int64_t min, int64_t max, std::string help) {
  return {std::move(help), [=](const std::string& text) -> std::string {
            int64_t value = 0;
            const char* end = text.data() + text.size();
            const auto [ptr, error] = std::from_chars(text.data(), end, value);
            if (text.empty() || error != std::errc() || ptr != end || value < min || value > max) {
              return "expected an integer from " + std::to_string(min) + " to " +
                     std::to_string(max);
            }
            *target = static_cast<T>(value);
            return "";
          }};
}

inline Flag StringFlag(std::string* target, std::string help) {
  return {std::move(help), [=](const std::string& text) -> std::string {
            if (text.empty()) return "expected a value, got an empty one";
            *target = text;
            return "";
          }};
}

// A string flag whose empty value is a choice of its own (--onnxruntime= leaves a side out).
inline Flag OptionalStringFlag(std::string* target, std::string help) {
  return {std::move(help), [=](const std::string& text) -> std::string {
            *target = text;
            return "";
          }};
}

// Parses "--flag value" and "--flag=value" with the flags given by name (without "--"); --help
// prints `usage` and the flags. Returns -1 when the tool should run, otherwise its exit code: 0
// after --help, 2 after a refusal of the form "--tokens 'abc': expected ...".
inline int ParseFlags(int argc, char** argv, const std::string& usage,
                      const std::map<std::string, Flag>& flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s\nFlags:\n", usage.c_str());
      for (const auto& [name, flag] : flags)
        std::printf("  --%s (%s)\n", name.c_str(), flag.help.c_str());
      return 0;
    }
    if (arg.rfind("--", 0) != 0) {
      std::fprintf(stderr, "unexpected argument '%s'; flags start with -- (--help lists them)\n",
                   arg.c_str());
      return 2;
    }
    std::string name = arg.substr(2);
    std::string value;
    if (const size_t equals = name.find('='); equals != std::string::npos) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "--%s: expected a value after it\n", name.c_str());
      return 2;
    }
    const auto flag = flags.find(name);
    if (flag == flags.end()) {
      std::fprintf(stderr, "unknown flag --%s (--help lists the flags)\n", name.c_str());
      return 2;
    }
    if (const std::string error = flag->second.set(value); !error.empty()) {
      std::fprintf(stderr, "--%s '%s': %s\n", name.c_str(), value.c_str(), error.c_str());
      return 2;
    }
  }
  return -1;
}

// Checks the --dir and --python flags the benchmarks share before anything is measured: the
// directory is created when missing and must be writable, and the interpreter must import torch
// (python3-torch). Prints the refusal naming the flag and returns false otherwise.
inline bool CheckDirAndPython(const std::string& dir, const std::string& python) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || access(dir.c_str(), W_OK) != 0) {
    std::fprintf(stderr, "--dir '%s': expected a directory this user can write, got %s\n",
                 dir.c_str(), error ? error.message().c_str() : "no write permission");
    return false;
  }
  const std::string command = "'" + python + "' -c 'import torch' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  char buffer[512];
  while (pipe != nullptr && fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  if (pipe == nullptr || pclose(pipe) != 0) {
    std::fprintf(stderr,
                 "--python '%s': expected a Python 3 that imports torch (Debian: python3-torch), "
                 "got: %s\n",
                 python.c_str(), output.empty() ? "it did not run" : output.c_str());
    return false;
  }
  return true;
}

}  // namespace attnscope::bench

#endif  // ATTNSCOPE_BENCH_BENCH_UTIL_H_
