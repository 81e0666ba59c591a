// Must not include Abseil (see sentencepiece_bridge.h).
#include "models/tokenizers/sentencepiece_bridge.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "models/tokenizers/sentencepiece_module.h"

namespace attnscope::sentencepiece_bridge {
namespace {

using Factory = ModuleProcessor* (*)();

constexpr char kModuleName[] = "libattnscope_sentencepiece.so";

// Candidates in order: the environment override, the module next to the running executable (an
// installed layout), the module where this build tree made it.
std::vector<std::string> ModuleCandidates() {
  std::vector<std::string> candidates;
  if (const char* path = std::getenv("ATTNSCOPE_SENTENCEPIECE_MODULE"); path && *path) {
    candidates.push_back(path);
  }
  char exe[4096];
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (length > 0) {
    std::string dir(exe, static_cast<size_t>(length));
    dir = dir.substr(0, dir.rfind('/') + 1);
    candidates.push_back(dir + kModuleName);
    candidates.push_back(dir + "../lib/" + kModuleName);
  }
  candidates.push_back(ATTNSCOPE_SENTENCEPIECE_MODULE_PATH);
  return candidates;
}

// dlopen()s the module once per process; nullptr with `error` set when no candidate loads.
Factory LoadFactory(std::string* error) {
  static std::once_flag once;
  static Factory factory = nullptr;
  static std::string load_error;
  std::call_once(once, [] {
    for (const std::string& path : ModuleCandidates()) {
      if (access(path.c_str(), R_OK) != 0) continue;
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle == nullptr) {
        load_error += "module '" + path + "': " + dlerror() + "; ";
        continue;
      }
      factory = reinterpret_cast<Factory>(dlsym(handle, "AttnscopeNewSentencePieceProcessor"));
      if (factory != nullptr) return;
      load_error += "module '" + path + "': no AttnscopeNewSentencePieceProcessor symbol; ";
    }
    load_error += "SentencePiece module '" + std::string(kModuleName) +
                  "': expected next to the executable or at ATTNSCOPE_SENTENCEPIECE_MODULE, "
                  "got no loadable file";
  });
  if (factory == nullptr) *error = load_error;
  return factory;
}

}  // namespace

bool Processor::LoadModule(std::string* error) { return LoadFactory(error) != nullptr; }

bool Processor::Load(const std::string& path, std::string* error) {
  if (impl_ == nullptr) {
    Factory factory = LoadFactory(error);
    if (factory == nullptr) return false;
    impl_.reset(factory());
  }
  return impl_->Load(path, error);
}

}  // namespace attnscope::sentencepiece_bridge
