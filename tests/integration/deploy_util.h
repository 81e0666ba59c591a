// Helpers of the deployment tests (Dockerfile, docker-compose, Prometheus, Grafana, Kubernetes):
// the source tree's files, the flags the real attnscope-server accepts, a Dockerfile reader, and
// HTTP calls with bodies (cpp-httplib) for the HTTP/JSON API and Prometheus' query API.
#ifndef ATTNSCOPE_TESTS_INTEGRATION_DEPLOY_UTIL_H_
#define ATTNSCOPE_TESTS_INTEGRATION_DEPLOY_UTIL_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {

// The source tree and the build tree, compiled in by CMake.
std::string SourceDir();
std::string BinaryDir();

// The whole file; NotFound naming the path when it cannot be read.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// The flag names (without "--") that `attnscope-server --help` lists: the ones defined in
// server/main.cc. Empty, with a test failure, when the binary does not run.
const std::set<std::string>& ServerFlagNames();

// "--name=value" -> {"name", "value"}; "--name" -> {"name", ""}.
std::pair<std::string, std::string> SplitFlag(const std::string& flag);

// The port of "HOST:PORT"; -1 when the text has no numeric port.
int PortOf(const std::string& address);

// One instruction of a Dockerfile: the keyword in upper case and its arguments, continuation lines
// joined (comments inside a continuation dropped, as Docker does).
struct DockerInstruction {
  std::string keyword;
  std::string arguments;
};

struct DockerStage {
  // The image after FROM and the stage name after AS (empty when unnamed).
  std::string image;
  std::string name;
  std::vector<DockerInstruction> instructions;
  // The arguments of every instruction with this keyword, in order.
  std::vector<std::string> All(const std::string& keyword) const;
};

// The stages of a Dockerfile in order.
std::vector<DockerStage> ParseDockerfile(const std::string& text);

// Words of a shell-free argument list: an exec-form JSON array (["a", "b"]) or whitespace-separated
// words. Options before an exec form (HEALTHCHECK's --interval=... CMD [...]) are not included.
std::vector<std::string> ExecForm(const std::string& arguments);

// The image's /opt/attnscope (Dockerfile) made in a temporary folder: models/ holds a link to every
// folder of the source tree's checkpoints/ that has a config.json (what the build stage copies),
// dashboard/ is empty.
class ImageLayout {
 public:
  ImageLayout();
  // Stands for /opt/attnscope.
  std::string root() const { return dir_.path() + "/opt/attnscope"; }
  // The models' folder names, sorted.
  const std::vector<std::string>& model_names() const { return model_names_; }

 private:
  TempDir dir_;
  std::vector<std::string> model_names_;
};

// An HTTP exchange with 127.0.0.1:port.
struct HttpAnswer {
  int status = 0;
  std::string body;
};
// POST with a body; Unavailable when the connection fails.
absl::StatusOr<HttpAnswer> HttpPost(int port, const std::string& path, const std::string& body,
                                    const std::string& content_type = "application/json");
// POST of an application/x-www-form-urlencoded form (e.g. Prometheus' /api/v1/query).
absl::StatusOr<HttpAnswer> HttpPostForm(int port, const std::string& path,
                                        const std::multimap<std::string, std::string>& form);

}  // namespace attnscope::testing

#endif  // ATTNSCOPE_TESTS_INTEGRATION_DEPLOY_UTIL_H_
