// The Dockerfile read as Docker reads it, checked against the project without a Docker engine:
// - its build stage runs scripts/install-deps.sh --build-only and scripts/build.sh --shipped, the
//   scripts of CI and the README limited to the build's packages (no test tool) and the shipped
//   targets (those the runtime stage copies), and no cmake or apt-get line of its own;
// - its runtime stage installs exactly the packages that own the libraries `ldd` resolves for the
//   built binaries (apt's choice between alternatives modelled from dpkg's database), then removes
//   what apt brought besides the packages scripts/linked-packages.sh lists, which agree with this
//   test's own reading of ldd and dpkg; it runs as a numeric non-root user, exposes the ports its
//   ENTRYPOINT's flags listen on, and health-checks with the CLI;
// - the ENTRYPOINT's flags, run on the real server over the image's layout (models/ folders that
//   hold a config.json, an empty dashboard folder), serve the built-in model and pass the
//   HEALTHCHECK command, and arguments given after the image name add or replace models as the
//   Dockerfile's comment says.
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/deploy_util.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr char kImageRoot[] = "/opt/attnscope";
// The init the image runs as PID 1 (Debian's tini package).
constexpr char kInit[] = "tini";

std::string ReadOrFail(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

class DockerfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    stages_ = ParseDockerfile(ReadOrFail(SourceDir() + "/Dockerfile"));
    ASSERT_EQ(stages_.size(), 2u) << "expected a build stage and a runtime stage";
  }
  const DockerStage& build() const { return stages_[0]; }
  const DockerStage& runtime() const { return stages_[1]; }

  // The ENTRYPOINT's words as written: tini, then the server's.
  std::vector<std::string> EntrypointWithInit() const {
    const std::vector<std::string> all = runtime().All("ENTRYPOINT");
    EXPECT_EQ(all.size(), 1u);
    return all.empty() ? std::vector<std::string>{} : ExecForm(all.back());
  }
  // The server's words in the ENTRYPOINT: the program, then its flags.
  std::vector<std::string> Entrypoint() const {
    std::vector<std::string> words = EntrypointWithInit();
    if (words.size() >= 2 && words[0] == kInit && words[1] == "--") {
      words.erase(words.begin(), words.begin() + 2);
    }
    return words;
  }
  // The ENTRYPOINT's flags by name (a later flag wins, as for absl).
  std::map<std::string, std::string> EntrypointFlags() const {
    std::map<std::string, std::string> flags;
    const std::vector<std::string> words = Entrypoint();
    for (size_t i = 1; i < words.size(); ++i) {
      auto [name, value] = SplitFlag(words[i]);
      flags[name] = value;
    }
    return flags;
  }

  std::vector<DockerStage> stages_;
};

TEST_F(DockerfileTest, BuildStageRunsTheProjectScriptsAndNoBuildLineOfItsOwn) {
  EXPECT_EQ(build().name, "build");
  const std::string runs = absl::StrJoin(build().All("RUN"), "\n");
  EXPECT_THAT(runs, HasSubstr("bash scripts/install-deps.sh --build-only"));
  EXPECT_THAT(runs, HasSubstr("bash scripts/build.sh --shipped"));
  // The dependency layer needs the script in the image before its RUN.
  EXPECT_THAT(build().All("COPY"), Contains(HasSubstr("scripts/install-deps.sh")));
  for (const DockerStage& stage : stages_) {
    for (const std::string& run : stage.All("RUN")) {
      EXPECT_FALSE(std::regex_search(run, std::regex(R"(\bcmake\b|\bninja\b|\bmake\b)")))
          << "a RUN line builds by itself; call scripts/build.sh instead: " << run;
    }
  }
  EXPECT_FALSE(std::regex_search(runs, std::regex(R"(\bapt(-get)?\s+install\b)")))
      << "the build stage installs packages of its own; add them to scripts/install-deps.sh";

  // The same two scripts are what CI and the README run: run.sh and test.sh build through
  // build.sh, which installs through install-deps.sh and holds the one cmake line.
  const std::string build_sh = ReadOrFail(SourceDir() + "/scripts/build.sh");
  EXPECT_THAT(build_sh, HasSubstr("scripts/install-deps.sh"));
  EXPECT_THAT(build_sh, HasSubstr("cmake -S"));
  for (const char* script : {"/scripts/run.sh", "/scripts/test.sh"}) {
    const std::string text = ReadOrFail(SourceDir() + script);
    EXPECT_THAT(text, HasSubstr("scripts/build.sh")) << script;
    EXPECT_THAT(text, Not(HasSubstr("cmake -S"))) << script << " configures by itself";
    EXPECT_THAT(text, Not(HasSubstr("apt-get install"))) << script << " installs by itself";
  }
  const std::string ci = ReadOrFail(SourceDir() + "/.ci/run");
  EXPECT_THAT(ci, HasSubstr("bash scripts/test.sh"));
  const std::string readme = ReadOrFail(SourceDir() + "/README.md");
  EXPECT_THAT(readme, HasSubstr("scripts/run.sh"));
  EXPECT_THAT(readme, HasSubstr("scripts/test.sh"));

  // A host build tree in the context would carry a CMakeCache.txt of another path into the image.
  const std::vector<std::string> ignored =
      absl::StrSplit(ReadOrFail(SourceDir() + "/.dockerignore"), '\n', absl::SkipWhitespace());
  EXPECT_THAT(ignored, Contains("build/"));
}

// The words of a bash array assignment `name=(...)` in `text`, comments left out.
std::vector<std::string> BashArray(const std::string& text, const std::string& name) {
  const size_t start = text.find("\n" + name + "=(");
  EXPECT_NE(start, std::string::npos) << name << "=( not found";
  if (start == std::string::npos) return {};
  const size_t open = text.find('(', start);
  const std::string body = text.substr(open + 1, text.find("\n)", open) - open - 1);
  std::vector<std::string> words;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    line = line.substr(0, line.find('#'));
    for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
      words.emplace_back(word);
    }
  }
  return words;
}

TEST_F(DockerfileTest, BuildStageInstallsNoTestToolAndBuildsWhatTheRuntimeStageCopies) {
  // install-deps.sh --build-only: the build's packages, none of the test tools, which the full
  // install still has.
  const std::string deps = ReadOrFail(SourceDir() + "/scripts/install-deps.sh");
  const std::vector<std::string> build_packages = BashArray(deps, "build_packages");
  const std::vector<std::string> test_packages = BashArray(deps, "test_packages");
  for (const char* tool : {"chromium", "prometheus", "docker-compose", "clang-14", "python3-torch",
                           "fonts-noto-cjk"}) {
    EXPECT_THAT(build_packages, Not(Contains(tool)));
    EXPECT_THAT(test_packages, Contains(tool));
  }
  for (const char* needed : {"libtorch-dev", "libgrpc++-dev", "ccache", "ninja-build"}) {
    EXPECT_THAT(build_packages, Contains(needed));
  }

  // build.sh --shipped builds the targets whose outputs the runtime stage copies (the dashboard's
  // folder comes through /opt/attnscope), with the fuzz targets off: they need clang.
  const std::string build_sh = ReadOrFail(SourceDir() + "/scripts/build.sh");
  std::smatch targets;
  ASSERT_TRUE(
      std::regex_search(build_sh, targets, std::regex(R"(set -- --target ([^"\n]*) "\$@")")))
      << "build.sh --shipped names no targets";
  const std::vector<std::string> shipped = absl::StrSplit(targets[1].str(), ' ');
  EXPECT_THAT(shipped, UnorderedElementsAre("attnscope-server", "attnscope",
                                            "attnscope_sentencepiece", "dashboard"));
  EXPECT_THAT(build_sh, HasSubstr("-DATTNSCOPE_FUZZ=OFF"));
  EXPECT_THAT(build_sh, HasSubstr("--build-only"));
  std::set<std::string> copied;
  for (const std::string& copy : runtime().All("COPY")) {
    for (const std::string& word : ExecForm(copy)) {
      if (absl::StartsWith(word, "/src/build/")) copied.insert(fs::path(word).filename().string());
    }
  }
  EXPECT_THAT(copied, UnorderedElementsAre("attnscope-server", "attnscope",
                                           "libattnscope_sentencepiece.so"));

  // The compile cache survives between builds: a rebuild after a change recompiles only that.
  const std::vector<std::string> build_runs = build().All("RUN");
  EXPECT_THAT(build_runs, Contains(AllOf(HasSubstr("--mount=type=cache,target=/root/.cache/ccache"),
                                         HasSubstr("bash scripts/build.sh --shipped"))));
}

TEST_F(DockerfileTest, BothStagesUseOnePinnedDebian12Image) {
  // A moving tag (debian:12, debian:bookworm-slim, latest) changes the image under the same file.
  const std::regex pinned(R"(debian:(12\.[0-9]+-slim|bookworm-[0-9]{8}-slim))");
  EXPECT_TRUE(std::regex_match(build().image, pinned)) << build().image;
  EXPECT_EQ(runtime().image, build().image);
}

TEST_F(DockerfileTest, RuntimeStageRunsAsNonRootAndLeavesNoAptLists) {
  const std::vector<std::string> users = runtime().All("USER");
  ASSERT_EQ(users.size(), 1u);
  // Numeric, so that Kubernetes' runAsNonRoot can check it without reading /etc/passwd.
  std::smatch uid;
  ASSERT_TRUE(std::regex_match(users[0], uid, std::regex(R"(([0-9]+)(:[0-9]+)?)"))) << users[0];
  EXPECT_GT(std::stoi(uid[1]), 0);
  EXPECT_THAT(absl::StrJoin(runtime().All("RUN"), "\n"), HasSubstr("useradd"));

  for (const DockerStage& stage : stages_) {
    for (const std::string& run : stage.All("RUN")) {
      if (!absl::StrContains(run, "apt-get update") && !absl::StrContains(run, "install-deps.sh")) {
        continue;
      }
      EXPECT_THAT(run, HasSubstr("rm -rf /var/lib/apt/lists/*"))
          << "this RUN leaves apt's lists in its layer";
    }
  }

  // Only what the build made: no COPY from the build context.
  for (const std::string& copy : runtime().All("COPY")) {
    EXPECT_THAT(copy, HasSubstr("--from=build")) << copy;
    // The build stage's outputs exist in this build tree at the same relative paths.
    for (const std::string& word : ExecForm(copy)) {
      if (!absl::StartsWith(word, "/src/build/")) continue;
      EXPECT_TRUE(fs::exists(BinaryDir() + word.substr(strlen("/src/build"))))
          << word << " is not where the build puts it (" << BinaryDir() << ")";
    }
  }
}

// The server is not PID 1: the kernel would drop a SIGTERM sent to it before main() blocks the
// signal (while the loader maps LibTorch), and `docker stop` would wait for its SIGKILL.
TEST_F(DockerfileTest, RunsTheServerUnderAnInitThatPassesSignalsOn) {
  const std::vector<std::string> words = EntrypointWithInit();
  ASSERT_GE(words.size(), 3u);
  EXPECT_EQ(words[0], kInit);
  EXPECT_EQ(words[1], "--");
  EXPECT_EQ(words[2], "attnscope-server");
  // Installed in the runtime stage and kept through the purge of what no binary loads.
  const std::string runs =
      std::regex_replace(absl::StrJoin(runtime().All("RUN"), "\n"), std::regex(R"(\s+)"), " ");
  EXPECT_THAT(runs, HasSubstr(" tini "));
  EXPECT_THAT(runs, HasSubstr("comm -23 - /tmp/linked-packages.txt | grep -vx tini"));
}

TEST_F(DockerfileTest, ExposesTheEntrypointPortsAndHealthChecksThroughTheCli) {
  const std::vector<std::string> entrypoint = Entrypoint();
  ASSERT_FALSE(entrypoint.empty());
  EXPECT_EQ(entrypoint[0], "attnscope-server");
  const std::map<std::string, std::string> flags = EntrypointFlags();
  for (const auto& [name, value] : flags) {
    EXPECT_TRUE(ServerFlagNames().count(name)) << "--" << name << " is not a flag of the server";
  }
  EXPECT_EQ(flags.at("listen"), "0.0.0.0:50051");
  EXPECT_EQ(flags.at("http_listen"), "0.0.0.0:8080");
  EXPECT_EQ(flags.at("metrics_port"), "9464");
  EXPECT_EQ(flags.at("model_repository"), absl::StrCat(kImageRoot, "/models"));
  EXPECT_EQ(flags.at("dashboard_dir"), absl::StrCat(kImageRoot, "/dashboard"));

  std::set<std::string> exposed;
  for (const std::string& expose : runtime().All("EXPOSE")) {
    for (const std::string& port : ExecForm(expose)) exposed.insert(port);
  }
  EXPECT_THAT(exposed, UnorderedElementsAre(std::to_string(PortOf(flags.at("listen"))),
                                            std::to_string(PortOf(flags.at("http_listen"))),
                                            flags.at("metrics_port")));

  const std::vector<std::string> healthchecks = runtime().All("HEALTHCHECK");
  ASSERT_EQ(healthchecks.size(), 1u);
  EXPECT_THAT(healthchecks[0], HasSubstr("CMD ["));
  EXPECT_THAT(ExecForm(healthchecks[0]),
              ElementsAre("attnscope", "health", "--server",
                          absl::StrCat("127.0.0.1:", PortOf(flags.at("listen")))));

  // The build stage makes both folders the flags name, and fills models/ from the source tree's
  // checkpoints/.
  const std::string runs = absl::StrJoin(build().All("RUN"), "\n");
  EXPECT_THAT(
      runs, HasSubstr(absl::StrCat("mkdir -p ", kImageRoot, "/models ", kImageRoot, "/dashboard")));
  EXPECT_THAT(runs, HasSubstr("build/dashboard"));
  EXPECT_THAT(runs, HasSubstr("config.json"));
}

// The names ListModels returns.
std::vector<std::string> ServedModels(const ServerProcess& server) {
  absl::StatusOr<std::vector<v1::ModelInfo>> models = server.NewClient()->ListModels();
  EXPECT_TRUE(models.ok()) << models.status();
  std::vector<std::string> names;
  if (models.ok()) {
    for (const v1::ModelInfo& model : *models) names.push_back(model.name());
  }
  return names;
}

TEST_F(DockerfileTest, EntrypointServesTheImageLayoutAndPassesTheHealthcheck) {
  ImageLayout layout;
  ASSERT_THAT(layout.model_names(), Contains("default"));
  // The ENTRYPOINT's flags with /opt/attnscope moved to the layout; the listen flags stay those
  // of ServerProcess (loopback, free ports): their values are checked above.
  ServerProcess::Options options;
  for (const auto& [name, value] : EntrypointFlags()) {
    if (name == "listen" || name == "http_listen" || name == "metrics_port") continue;
    options.extra_flags.push_back(
        absl::StrCat("--", name, "=", absl::StrReplaceAll(value, {{kImageRoot, layout.root()}})));
  }
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(ServedModels(**server), layout.model_names());

  std::vector<std::string> healthcheck = ExecForm(runtime().All("HEALTHCHECK").at(0));
  ASSERT_EQ(healthcheck.size(), 4u);
  healthcheck[0] = CliBinary();
  healthcheck[3] = (*server)->address();
  const CommandResult health = RunCommand(healthcheck, absl::Seconds(30));
  EXPECT_EQ(health.exit_code, 0) << health.stderr_text;
  EXPECT_EQ(nlohmann::json::parse(health.stdout_text, nullptr, false),
            nlohmann::json({{"status", "SERVING"}}));

  // The same command fails against a port nobody serves, so that the healthcheck can fail.
  healthcheck[3] = absl::StrCat("127.0.0.1:", FreeTcpPort());
  healthcheck.push_back("--timeout=2s");
  EXPECT_NE(RunCommand(healthcheck, absl::Seconds(30)).exit_code, 0);
}

TEST_F(DockerfileTest, ArgumentsAfterTheImageAddOrReplaceModels) {
  ImageLayout layout;
  std::vector<std::string> image_flags;
  for (const auto& [name, value] : EntrypointFlags()) {
    if (name == "model_repository" || name == "dashboard_dir") {
      image_flags.push_back(
          absl::StrCat("--", name, "=", absl::StrReplaceAll(value, {{kImageRoot, layout.root()}})));
    }
  }
  // `docker run -v /my/checkpoints:/models attnscope --model mine=/models/mine`: beside the
  // built-in models.
  ServerProcess::Options add;
  add.extra_flags = image_flags;
  add.extra_flags.push_back("--model=mine=" + TinyBertDir());
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(add);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::string> expected = {"mine"};
  expected.insert(expected.end(), layout.model_names().begin(), layout.model_names().end());
  EXPECT_EQ(ServedModels(**server), expected);
  server->reset();

  // `... attnscope --model_repository=/models`: the mounted folder instead of the built-in one.
  TempDir mounted;
  fs::create_directory_symlink(TinyBertDir(), mounted.path() + "/mine");
  ServerProcess::Options replace;
  replace.extra_flags = image_flags;
  replace.extra_flags.push_back("--model_repository=" + mounted.path());
  server = ServerProcess::Start(replace);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_THAT(ServedModels(**server), ElementsAre("mine"));
}

// What dpkg knows of the installed packages: dependencies and virtual packages.
class PackageGraph {
 public:
  PackageGraph() {
    const CommandResult query = RunCommand(
        {"/usr/bin/dpkg-query", "-W", "-f=${Package}\t${Depends}\t${Pre-Depends}\t${Provides}\n"});
    EXPECT_EQ(query.exit_code, 0) << query.stderr_text;
    for (absl::string_view line : absl::StrSplit(query.stdout_text, '\n', absl::SkipEmpty())) {
      const std::vector<std::string> fields = absl::StrSplit(line, '\t');
      if (fields.size() != 4) continue;
      std::vector<std::vector<std::string>>& groups = depends_[fields[0]];
      for (const std::string& field : {fields[1], fields[2]}) {
        for (absl::string_view group : absl::StrSplit(field, ',', absl::SkipWhitespace())) {
          std::vector<std::string> alternatives;
          for (absl::string_view alternative : absl::StrSplit(group, '|')) {
            alternatives.push_back(PackageName(alternative));
          }
          groups.push_back(std::move(alternatives));
        }
      }
      for (absl::string_view provided : absl::StrSplit(fields[3], ',', absl::SkipWhitespace())) {
        providers_[PackageName(provided)].push_back(fields[0]);
      }
    }
  }

  // What `apt-get install --no-install-recommends <listed>` brings, as apt chooses: a dependency
  // group already satisfied by a package being installed adds nothing; otherwise its first
  // alternative comes (through its first installed provider when it is a virtual package). So a
  // package that only satisfies an alternative (libopenblas0-pthread for "libblas3 |
  // libblas.so.3") is installed only when listed.
  std::set<std::string> InstallClosure(const std::set<std::string>& listed) const {
    std::set<std::string> installed = listed;
    std::vector<std::string> pending(listed.begin(), listed.end());
    while (!pending.empty()) {
      const std::string package = pending.back();
      pending.pop_back();
      auto it = depends_.find(package);
      if (it == depends_.end()) continue;
      for (const std::vector<std::string>& group : it->second) {
        bool satisfied = false;
        for (const std::string& alternative : group) {
          for (const std::string& real : RealPackages(alternative)) {
            satisfied = satisfied || installed.count(real) > 0;
          }
        }
        if (satisfied || group.empty()) continue;
        const std::vector<std::string> first = RealPackages(group[0]);
        if (!first.empty() && installed.insert(first[0]).second) pending.push_back(first[0]);
      }
    }
    return installed;
  }

 private:
  // "libfoo (>= 1.2)" or "python3:any" -> "libfoo", "python3".
  static std::string PackageName(absl::string_view text) {
    text = absl::StripAsciiWhitespace(text);
    return std::string(text.substr(0, text.find_first_of(" :(")));
  }
  // The name itself when it is a package (installed or not: a name nothing here provides is taken
  // as a package), else the installed packages that provide it.
  std::vector<std::string> RealPackages(const std::string& name) const {
    if (depends_.count(name) || !providers_.count(name)) return {name};
    return providers_.at(name);
  }

  std::map<std::string, std::vector<std::vector<std::string>>> depends_;
  std::map<std::string, std::vector<std::string>> providers_;
};

// The libraries the dynamic loader resolves for `binaries` (ldd: the whole closure).
std::set<std::string> LinkedLibraries(const std::vector<std::string>& binaries) {
  std::vector<std::string> argv = {"/usr/bin/ldd"};
  argv.insert(argv.end(), binaries.begin(), binaries.end());
  const CommandResult ldd = RunCommand(argv);
  EXPECT_EQ(ldd.exit_code, 0) << ldd.stderr_text;
  EXPECT_THAT(ldd.stdout_text, Not(HasSubstr("not found")));
  std::set<std::string> libraries;
  static const std::regex kResolved(R"(=> (/\S+) \(0x)");
  static const std::regex kLoader(R"(^\s+(/\S+) \(0x)");
  std::istringstream lines(ldd.stdout_text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch match;
    if (std::regex_search(line, match, kResolved) || std::regex_search(line, match, kLoader)) {
      libraries.insert(fs::canonical(match[1].str()).string());
    }
  }
  return libraries;
}

// Package owning each file, from `dpkg -S`. dpkg records a library under /lib or /usr/lib as its
// package installed it, while the resolved path is under /usr (merged /usr), so both are asked.
std::map<std::string, std::string> OwningPackages(const std::set<std::string>& files) {
  std::map<std::string, std::string> owners;
  std::map<std::string, std::string> asked;  // the path asked -> the file it stands for
  for (const std::string& file : files) {
    asked[file] = file;
    if (absl::StartsWith(file, "/usr/lib/")) asked[file.substr(4)] = file;
  }
  std::vector<std::string> argv = {"/usr/bin/dpkg", "-S"};
  for (const auto& [path, file] : asked) argv.push_back(path);
  // Exit code 1 when some path is unowned, which the /lib and /usr/lib pairs always give.
  const CommandResult search = RunCommand(argv);
  std::istringstream lines(search.stdout_text);
  for (std::string line; std::getline(lines, line);) {
    const size_t separator = line.find(": /");
    if (separator == std::string::npos || absl::StartsWith(line, "diversion by")) continue;
    auto it = asked.find(line.substr(separator + 2));
    if (it == asked.end()) continue;
    // "libfoo1:amd64" -> "libfoo1"; one owner is enough (several only share directories).
    std::string package = line.substr(0, line.find_first_of(",:"));
    owners[it->second] = package;
  }
  return owners;
}

TEST_F(DockerfileTest, RuntimePackagesAreWhatTheBinariesLink) {
  std::set<std::string> listed;
  for (const std::string& run : runtime().All("RUN")) {
    const size_t install = run.find("apt-get install");
    if (install == std::string::npos) continue;
    for (const std::string& word :
         ExecForm(run.substr(install, run.find("&&", install) - install))) {
      if (word != "apt-get" && word != "install" && word[0] != '-') listed.insert(word);
    }
  }
  ASSERT_FALSE(listed.empty()) << "the runtime stage installs no package";

  // Our own module is copied from the build; what it links is not.
  const std::string module = BinaryDir() + "/lib/libattnscope_sentencepiece.so";
  std::set<std::string> libraries = LinkedLibraries(
      {BinaryDir() + "/server/attnscope-server", BinaryDir() + "/client/attnscope", module});
  ASSERT_GT(libraries.size(), 10u);
  const std::map<std::string, std::string> owners = OwningPackages(libraries);
  std::set<std::string> needed;
  for (const std::string& library : libraries) {
    auto it = owners.find(library);
    ASSERT_NE(it, owners.end()) << library << " belongs to no Debian package: the image cannot "
                                << "install it";
    needed.insert(it->second);
  }

  const std::set<std::string> installed = PackageGraph().InstallClosure(listed);
  for (const std::string& package : needed) {
    EXPECT_TRUE(installed.count(package))
        << package << " owns a library the binaries load, and the runtime stage's apt-get "
        << "install neither lists it nor brings it as a dependency: add it to the Dockerfile";
  }
  for (const std::string& package : listed) {
    if (package == kInit) continue;  // the image's PID 1 (RunsTheServerUnderAnInit...)
    EXPECT_TRUE(needed.count(package))
        << package << " is installed in the runtime stage but owns no library the binaries "
        << "load (ldd): remove it from the Dockerfile";
  }
  // The one listed only for an alternative: without it, apt brings the reference BLAS.
  EXPECT_TRUE(listed.count("libopenblas0-pthread"));

  // What the runtime stage keeps of apt's install: scripts/linked-packages.sh's list, which the
  // build stage makes from the same three binaries, is this test's `needed`.
  const CommandResult linked = RunCommand({"/bin/bash", SourceDir() + "/scripts/linked-packages.sh",
                                           BinaryDir() + "/server/attnscope-server",
                                           BinaryDir() + "/client/attnscope", module});
  ASSERT_EQ(linked.exit_code, 0) << linked.stderr_text;
  const std::vector<std::string> kept = absl::StrSplit(linked.stdout_text, '\n', absl::SkipEmpty());
  EXPECT_EQ(std::set<std::string>(kept.begin(), kept.end()), needed);
  // Continuation lines leave runs of spaces.
  const std::string build_runs =
      std::regex_replace(absl::StrJoin(build().All("RUN"), "\n"), std::regex(R"(\s+)"), " ");
  EXPECT_THAT(build_runs,
              HasSubstr("bash scripts/linked-packages.sh build/server/attnscope-server "
                        "build/client/attnscope build/lib/libattnscope_sentencepiece.so "
                        ">/src/linked-packages.txt"));
  EXPECT_THAT(runtime().All("COPY"),
              Contains("--from=build /src/linked-packages.txt /tmp/linked-packages.txt"));
  // Removed in the RUN that installs, or the image would still hold them in that layer.
  bool purged = false;
  for (const std::string& run : runtime().All("RUN")) {
    if (!absl::StrContains(run, "apt-get install")) continue;
    purged = absl::StrContains(run, "comm -23 - /tmp/linked-packages.txt") &&
             absl::StrContains(run, "dpkg --purge --force-depends");
  }
  EXPECT_TRUE(purged) << "the runtime stage's install keeps what no binary loads";
}

}  // namespace
}  // namespace attnscope::testing
