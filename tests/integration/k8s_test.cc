// deploy/k8s read with a YAML parser and checked against the real server and the Dockerfile:
// - the ConfigMap's flag file names only flags of `attnscope-server --help`, and the real server
//   starts on it (ports moved to loopback) over the image's layout and answers both health
//   services the probes ask for;
// - the Deployment's container ports are the flags' ports, its probes are gRPC probes of those
//   services on the gRPC port, its Prometheus annotations name the metrics port, its user is the
//   image's, and terminationGracePeriodSeconds covers preStop plus the SIGTERM drain;
// - its memory request and limit cover the resident memory measured here under concurrent
//   traffic at the default model's longest input;
// - the Services, the HorizontalPodAutoscaler and the PodDisruptionBudget select the pods and
//   target the Deployment's ports.
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
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
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

constexpr char kFlagsKey[] = "attnscope.flags";
constexpr char kImageRoot[] = "/opt/attnscope";

// Every document of every deploy/k8s/*.yaml, by kind and then by name.
class Manifests {
 public:
  Manifests() {
    for (const auto& entry : fs::directory_iterator(SourceDir() + "/deploy/k8s")) {
      if (entry.path().extension() != ".yaml") continue;
      try {
        for (const YAML::Node& document : YAML::LoadAllFromFile(entry.path().string())) {
          if (!document.IsMap()) continue;
          by_kind_[document["kind"].as<std::string>("")].push_back(document);
        }
      } catch (const YAML::Exception& error) {
        ADD_FAILURE() << entry.path() << ": " << error.what();
      }
    }
  }
  // The one object of `kind`; a failure (and a null node) when there is none or several.
  YAML::Node One(const std::string& kind) const {
    auto it = by_kind_.find(kind);
    EXPECT_TRUE(it != by_kind_.end() && it->second.size() == 1) << "expected one " << kind;
    return it != by_kind_.end() && it->second.size() == 1 ? it->second[0] : YAML::Node();
  }
  std::vector<YAML::Node> All(const std::string& kind) const {
    auto it = by_kind_.find(kind);
    return it == by_kind_.end() ? std::vector<YAML::Node>{} : it->second;
  }
  std::set<std::string> Kinds() const {
    std::set<std::string> kinds;
    for (const auto& [kind, objects] : by_kind_) kinds.insert(kind);
    return kinds;
  }

 private:
  std::map<std::string, std::vector<YAML::Node>> by_kind_;
};

std::map<std::string, std::string> StringMap(const YAML::Node& node) {
  std::map<std::string, std::string> out;
  for (const auto& entry : node)
    out[entry.first.as<std::string>()] = entry.second.as<std::string>();
  return out;
}

// A Kubernetes memory quantity in bytes: "384Mi", "1Gi", "500M", "1000".
double Bytes(const std::string& quantity) {
  static const std::map<std::string, double> kSuffixes = {{"", 1},
                                                          {"k", 1e3},
                                                          {"M", 1e6},
                                                          {"G", 1e9},
                                                          {"Ki", 1024},
                                                          {"Mi", 1024.0 * 1024},
                                                          {"Gi", 1024.0 * 1024 * 1024}};
  std::smatch match;
  double number = 0;
  if (!std::regex_match(quantity, match, std::regex(R"(([0-9.]+)([kMG]i?)?)")) ||
      !absl::SimpleAtod(match[1].str(), &number) || !kSuffixes.count(match[2].str())) {
    ADD_FAILURE() << "not a memory quantity: " << quantity;
    return 0;
  }
  return number * kSuffixes.at(match[2].str());
}

class K8sTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(manifests_.Kinds(),
              (std::set<std::string>{"ConfigMap", "Deployment", "Service",
                                     "HorizontalPodAutoscaler", "PodDisruptionBudget"}));
    deployment_ = manifests_.One("Deployment");
    pod_ = deployment_["spec"]["template"];
    ASSERT_EQ(pod_["spec"]["containers"].size(), 1u);
    container_ = pod_["spec"]["containers"][0];
    for (const YAML::Node& port : container_["ports"]) {
      ports_[port["name"].as<std::string>()] = port["containerPort"].as<int>();
    }
    // The flag file the container reads: --flagfile=<mount path>/<key> of a ConfigMap volume.
    ASSERT_THAT(container_["args"].as<std::vector<std::string>>(),
                ElementsAre(absl::StrCat("--flagfile=/etc/attnscope/", kFlagsKey)));
    std::string volume;
    for (const YAML::Node& mount : container_["volumeMounts"]) {
      if (mount["mountPath"].as<std::string>() == "/etc/attnscope") {
        volume = mount["name"].as<std::string>();
      }
    }
    std::string config_map;
    for (const YAML::Node& entry : pod_["spec"]["volumes"]) {
      if (entry["name"].as<std::string>() == volume) {
        config_map = entry["configMap"]["name"].as<std::string>("");
      }
    }
    const YAML::Node map = manifests_.One("ConfigMap");
    ASSERT_EQ(map["metadata"]["name"].as<std::string>(""), config_map)
        << "the container's /etc/attnscope is not the ConfigMap";
    flag_file_ = map["data"][kFlagsKey].as<std::string>("");
    for (absl::string_view line : absl::StrSplit(flag_file_, '\n', absl::SkipWhitespace())) {
      line = absl::StripAsciiWhitespace(line);
      if (absl::StartsWith(line, "#")) continue;
      auto [name, value] = SplitFlag(std::string(line));
      flags_[name] = value;
    }
    ASSERT_FALSE(flags_.empty());
  }

  // The flag file with the listen flags dropped (ServerProcess puts the server on loopback ports)
  // and /opt/attnscope moved to `layout`.
  std::string LocalFlagFile(const ImageLayout& layout, const std::string& dir) const {
    std::string text;
    for (absl::string_view line : absl::StrSplit(flag_file_, '\n')) {
      const std::string name = SplitFlag(std::string(absl::StripAsciiWhitespace(line))).first;
      if (name == "listen" || name == "http_listen" || name == "metrics_port") continue;
      absl::StrAppend(&text, absl::StrReplaceAll(line, {{kImageRoot, layout.root()}}), "\n");
    }
    const std::string path = dir + "/" + kFlagsKey;
    std::ofstream(path) << text;
    return path;
  }

  // Whether `selector` (matchLabels or a Service's selector) picks the Deployment's pods.
  void ExpectSelectsPods(const YAML::Node& selector, const std::string& what) const {
    const std::map<std::string, std::string> labels = StringMap(pod_["metadata"]["labels"]);
    const std::map<std::string, std::string> wanted = StringMap(selector);
    EXPECT_FALSE(wanted.empty()) << what << " selects everything";
    for (const auto& [key, value] : wanted) {
      auto it = labels.find(key);
      EXPECT_TRUE(it != labels.end() && it->second == value)
          << what << " selects " << key << "=" << value << ", which the pods do not carry";
    }
  }

  Manifests manifests_;
  YAML::Node deployment_;
  YAML::Node pod_;
  YAML::Node container_;
  std::map<std::string, int> ports_;
  std::string flag_file_;
  std::map<std::string, std::string> flags_;
};

TEST_F(K8sTest, FlagsAreTheServersAndPortsMatchThem) {
  for (const auto& [name, value] : flags_) {
    EXPECT_TRUE(ServerFlagNames().count(name))
        << "--" << name << " in the ConfigMap is not a flag of attnscope-server";
  }
  EXPECT_EQ(ports_.at("grpc"), PortOf(flags_.at("listen")));
  EXPECT_EQ(ports_.at("http"), PortOf(flags_.at("http_listen")));
  EXPECT_EQ(std::to_string(ports_.at("metrics")), flags_.at("metrics_port"));
  // Pods are reached on their own address, not loopback.
  EXPECT_TRUE(absl::StartsWith(flags_.at("listen"), "0.0.0.0:"));
  EXPECT_TRUE(absl::StartsWith(flags_.at("http_listen"), "0.0.0.0:"));

  // The image listens on the same ports and runs as the same user.
  const std::vector<DockerStage> stages =
      ParseDockerfile(ReadTextFile(SourceDir() + "/Dockerfile").value_or(""));
  ASSERT_FALSE(stages.empty());
  std::set<int> exposed;
  for (const std::string& expose : stages.back().All("EXPOSE")) {
    for (const std::string& port : ExecForm(expose)) exposed.insert(std::stoi(port));
  }
  EXPECT_THAT(exposed,
              UnorderedElementsAre(ports_.at("grpc"), ports_.at("http"), ports_.at("metrics")));
  const YAML::Node security = pod_["spec"]["securityContext"];
  EXPECT_TRUE(security["runAsNonRoot"].as<bool>(false));
  ASSERT_EQ(stages.back().All("USER").size(), 1u);
  EXPECT_EQ(
      absl::StrCat(security["runAsUser"].as<int>(-1), ":", security["runAsGroup"].as<int>(-1)),
      stages.back().All("USER")[0]);
  EXPECT_TRUE(container_["securityContext"]["readOnlyRootFilesystem"].as<bool>(false));

  // Prometheus' pod annotations name the metrics port and the path the server serves.
  const std::map<std::string, std::string> annotations = StringMap(pod_["metadata"]["annotations"]);
  EXPECT_EQ(annotations.at("prometheus.io/scrape"), "true");
  EXPECT_EQ(annotations.at("prometheus.io/port"), std::to_string(ports_.at("metrics")));
  EXPECT_EQ(annotations.at("prometheus.io/path"), "/metrics");
}

TEST_F(K8sTest, ProbesAreGrpcHealthChecksOfTheServedServices) {
  const YAML::Node startup = container_["startupProbe"]["grpc"];
  const YAML::Node readiness = container_["readinessProbe"]["grpc"];
  const YAML::Node liveness = container_["livenessProbe"]["grpc"];
  for (const YAML::Node& probe : {startup, readiness, liveness}) {
    ASSERT_TRUE(probe.IsMap()) << "every probe is a native gRPC probe";
    EXPECT_EQ(probe["port"].as<int>(), ports_.at("grpc"));
  }
  EXPECT_EQ(readiness["service"].as<std::string>(""), "attnscope.v1.AttentionService");
  EXPECT_EQ(liveness["service"].as<std::string>(""), "");
  EXPECT_EQ(startup["service"].as<std::string>(""), "");
  // Loading may take minutes for a big checkpoint; liveness must not kill it meanwhile.
  EXPECT_GE(container_["startupProbe"]["periodSeconds"].as<int>() *
                container_["startupProbe"]["failureThreshold"].as<int>(),
            120);

  // The real server on the ConfigMap's flags answers SERVING to exactly those two services.
  ImageLayout layout;
  TempDir dir;
  ServerProcess::Options options;
  options.extra_flags = {"--flagfile=" + LocalFlagFile(layout, dir.path())};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  for (const std::string& service : {readiness["service"].as<std::string>(""), std::string()}) {
    std::vector<std::string> argv = {CliBinary(), "health", "--server", (*server)->address()};
    if (!service.empty()) argv.insert(argv.end(), {"--service", service});
    const CommandResult health = RunCommand(argv);
    EXPECT_EQ(health.exit_code, 0) << "service '" << service << "': " << health.stderr_text;
    EXPECT_EQ(health.stdout_text, "{\"status\":\"SERVING\"}\n") << "service '" << service << "'";
  }
  const CommandResult unknown = RunCommand(
      {CliBinary(), "health", "--server", (*server)->address(), "--service", "no.such.Service"});
  EXPECT_NE(unknown.exit_code, 0) << "the health check cannot fail: " << unknown.stdout_text;
}

TEST_F(K8sTest, TerminationGraceCoversPreStopAndTheDrain) {
  const std::vector<std::string> pre_stop =
      container_["lifecycle"]["preStop"]["exec"]["command"].as<std::vector<std::string>>();
  ASSERT_EQ(pre_stop.size(), 2u);
  EXPECT_EQ(pre_stop[0], "sleep");
  double drain = 0;
  ASSERT_TRUE(absl::SimpleAtod(flags_.at("shutdown_grace_seconds"), &drain));
  const double settle = 5;
  EXPECT_GE(pod_["spec"]["terminationGracePeriodSeconds"].as<double>(),
            std::stod(pre_stop[1]) + drain + settle);
}

TEST_F(K8sTest, MemoryRequestAndLimitCoverTheMeasuredResidentMemory) {
  const YAML::Node resources = container_["resources"];
  const double request = Bytes(resources["requests"]["memory"].as<std::string>(""));
  const double limit = Bytes(resources["limits"]["memory"].as<std::string>(""));
  EXPECT_GE(limit, request);
  EXPECT_FALSE(resources["requests"]["cpu"].as<std::string>("").empty())
      << "the HorizontalPodAutoscaler's utilization is relative to the CPU request";

  // The server on the ConfigMap's flags (the image's default model) under concurrent calls at the
  // model's longest input, as many at once as --max_concurrent_requests lets in.
  ImageLayout layout;
  TempDir dir;
  ServerProcess::Options options;
  options.metrics_port = FreeTcpPort();
  options.extra_flags = {"--flagfile=" + LocalFlagFile(layout, dir.path())};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = (*server)->NewClient();
  std::string text;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&text, "insert a table into the document ");
  v1::GetAttentionRequest attention;
  attention.set_text(text);
  attention.set_text_pair(text);
  attention.set_include_scores(true);
  attention.mutable_tokenization()->set_truncation(v1::TRUNCATION_LONGEST_FIRST);
  v1::CrossAttentionRequest cross;
  cross.set_query("insert a table");
  for (int i = 0; i < 3; ++i) cross.add_documents(text);
  cross.set_include_document_to_query(true);
  *cross.mutable_tokenization() = attention.tokenization();
  int max_concurrent = 0;
  ASSERT_TRUE(absl::SimpleAtoi(flags_.at("max_concurrent_requests"), &max_concurrent));
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int i = 0; i < max_concurrent; ++i) {
    callers.emplace_back([&] {
      for (int round = 0; round < 3; ++round) {
        absl::StatusOr<AttentionResult> answer = client->GetAttention(attention);
        // The longest input: every layer and head of a 128 x 128 attention.
        if (!answer.ok() || answer->attentions.shape.back() != 128) ++failures;
        if (!client->CrossAttention(cross).ok()) ++failures;
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(failures.load(), 0);

  absl::StatusOr<std::string> body = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  const std::vector<MetricSample> rss =
      FindSamples(ParseMetrics(*body), "attnscope_process_resident_memory_bytes");
  ASSERT_EQ(rss.size(), 1u);
  const double resident = rss[0].value;
  EXPECT_GT(resident, 50e6);
  // Headroom for traffic heavier than this test's, as measured in deployment.yaml's comment.
  EXPECT_GE(request, 1.1 * resident)
      << "memory request " << request << " B, measured " << resident << " B resident";
  EXPECT_GE(limit, 1.5 * resident)
      << "memory limit " << limit << " B, measured " << resident << " B resident";
}

TEST_F(K8sTest, ServicesAutoscalerAndDisruptionBudgetTargetThePods) {
  const std::string name = deployment_["metadata"]["name"].as<std::string>("");
  ExpectSelectsPods(deployment_["spec"]["selector"]["matchLabels"], "the Deployment");

  std::map<std::string, YAML::Node> services;
  for (const YAML::Node& service : manifests_.All("Service")) {
    services[service["metadata"]["name"].as<std::string>()] = service;
  }
  ASSERT_EQ(services.size(), 2u);
  for (const auto& [service_name, service] : services) {
    ExpectSelectsPods(service["spec"]["selector"], "Service " + service_name);
    for (const YAML::Node& port : service["spec"]["ports"]) {
      const std::string target = port["targetPort"].as<std::string>("");
      ASSERT_TRUE(ports_.count(target))
          << service_name << " targets port '" << target << "', which the container does not name";
      EXPECT_EQ(port["port"].as<int>(), ports_.at(target)) << service_name;
    }
  }
  // The headless one is what dns:/// clients resolve to every ready pod.
  const YAML::Node& headless = services.at(name + "-headless");
  EXPECT_EQ(headless["spec"]["clusterIP"].as<std::string>(""), "None");
  EXPECT_EQ(headless["spec"]["ports"][0]["targetPort"].as<std::string>(""), "grpc");
  EXPECT_FALSE(headless["spec"]["publishNotReadyAddresses"].as<bool>(false));
  EXPECT_EQ(services.at(name)["spec"]["ports"].size(), ports_.size());

  const YAML::Node hpa = manifests_.One("HorizontalPodAutoscaler");
  EXPECT_EQ(hpa["apiVersion"].as<std::string>(""), "autoscaling/v2");
  EXPECT_EQ(hpa["spec"]["scaleTargetRef"]["kind"].as<std::string>(""), "Deployment");
  EXPECT_EQ(hpa["spec"]["scaleTargetRef"]["name"].as<std::string>(""), name);
  const int min_replicas = hpa["spec"]["minReplicas"].as<int>(0);
  EXPECT_GE(min_replicas, 2);
  EXPECT_GT(hpa["spec"]["maxReplicas"].as<int>(0), min_replicas);
  EXPECT_FALSE(deployment_["spec"]["replicas"].IsDefined())
      << "the HorizontalPodAutoscaler owns the replica count; a re-apply would reset it";
  // Rolling updates never go below the autoscaler's count.
  EXPECT_EQ(deployment_["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"].as<int>(-1), 0);

  const YAML::Node pdb = manifests_.One("PodDisruptionBudget");
  ExpectSelectsPods(pdb["spec"]["selector"]["matchLabels"], "the PodDisruptionBudget");
  // Drains take at most one replica at a time and can always make progress.
  EXPECT_EQ(pdb["spec"]["maxUnavailable"].as<int>(0), 1);
  EXPECT_LT(pdb["spec"]["maxUnavailable"].as<int>(0), min_replicas);
}

}  // namespace
}  // namespace attnscope::testing
