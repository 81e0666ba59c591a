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
//   target the Deployment's ports;
// - deploy/k8s/balancer (HAProxy in front of the pods) carries deploy/haproxy/haproxy.cfg as it
//   is, which tests/integration/balancer_test.cc runs, finds the pods through the headless
//   Service, and HAProxy accepts its configuration;
// - deploy/k8s/keda's ScaledObject takes over the HorizontalPodAutoscaler with its bounds and
//   CPU target, and its Prometheus queries name series the real server exports.
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
#include "common/limits.h"
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
constexpr char kHaproxy[] = "/usr/sbin/haproxy";

std::string K8sDir() { return SourceDir() + "/deploy/k8s"; }

// Every document of every *.yaml directly in `dir` (deploy/k8s by default, which
// `kubectl apply -f deploy/k8s/` applies; its subfolders are applied on their own), by kind.
class Manifests {
 public:
  explicit Manifests(const std::string& dir = K8sDir()) {
    for (const auto& entry : fs::directory_iterator(dir)) {
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
  // model's longest input, as many at once as --max_concurrent_requests lets in. The test's
  // clients share one address, which a pod's do not: no per-client share here.
  ImageLayout layout;
  TempDir dir;
  ServerProcess::Options options;
  options.metrics_port = FreeTcpPort();
  options.extra_flags = {
      "--flagfile=" + LocalFlagFile(layout, dir.path()),
      "--max_concurrent_requests_per_client=" + flags_.at("max_concurrent_requests"),
      "--max_answer_bytes_per_client=" + std::to_string(kDefaultMaxAnswerBytesInFlight)};
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

// The value of `--name=` in the flag file of the ConfigMap of deploy/k8s.
std::string ConfigMapFlag(const Manifests& manifests, const std::string& name) {
  const std::string file = manifests.One("ConfigMap")["data"][kFlagsKey].as<std::string>("");
  std::smatch match;
  EXPECT_TRUE(std::regex_search(file, match, std::regex("--" + name + "=(\\S+)")))
      << "--" << name << " not in the ConfigMap";
  return match.empty() ? "" : match[1].str();
}

TEST(K8sBalancerTest, RunsTheTestedHaproxyConfigOverTheHeadlessService) {
  const Manifests base;
  const Manifests balancer(K8sDir() + "/balancer");
  ASSERT_EQ(balancer.Kinds(), (std::set<std::string>{"ConfigMap", "Deployment", "Service"}));
  const YAML::Node config = balancer.One("ConfigMap");
  const std::map<std::string, std::string> files = StringMap(config["data"]);
  ASSERT_EQ(files.count("haproxy.cfg") + files.count("replicas.cfg"), 2u);
  // The balancer itself is the file the rolling-restart test runs, byte for byte.
  EXPECT_EQ(files.at("haproxy.cfg"),
            ReadTextFile(SourceDir() + "/deploy/haproxy/haproxy.cfg").value_or(""))
      << "deploy/k8s/balancer/balancer.yaml's haproxy.cfg differs from deploy/haproxy/haproxy.cfg";

  // The replicas are the headless Service's pods, on its gRPC port, as many slots as the
  // autoscaler may make pods.
  std::smatch match;
  const std::string& replicas = files.at("replicas.cfg");
  ASSERT_TRUE(std::regex_search(replicas, match,
                                std::regex(R"(server-template \S+ (\d+) ([^\s:]+):(\d+) )")))
      << replicas;
  std::string headless;
  int headless_port = 0;
  for (const YAML::Node& service : base.All("Service")) {
    if (service["spec"]["clusterIP"].as<std::string>("") == "None") {
      headless = service["metadata"]["name"].as<std::string>();
      headless_port = service["spec"]["ports"][0]["port"].as<int>();
    }
  }
  EXPECT_EQ(match[2].str(), headless + ".default.svc.cluster.local");
  EXPECT_EQ(std::stoi(match[3].str()), headless_port);
  EXPECT_GE(std::stoi(match[1].str()),
            base.One("HorizontalPodAutoscaler")["spec"]["maxReplicas"].as<int>());

  // The container reads both files from the ConfigMap's mount, listens where its ports say, and
  // its probes ask the stats page.
  const YAML::Node pod = balancer.One("Deployment")["spec"]["template"];
  ASSERT_EQ(pod["spec"]["containers"].size(), 1u);
  const YAML::Node container = pod["spec"]["containers"][0];
  std::string mount;
  for (const YAML::Node& volume : pod["spec"]["volumes"]) {
    if (volume["configMap"]["name"].as<std::string>("") !=
        config["metadata"]["name"].as<std::string>()) {
      continue;
    }
    for (const YAML::Node& entry : container["volumeMounts"]) {
      if (entry["name"].as<std::string>() == volume["name"].as<std::string>()) {
        mount = entry["mountPath"].as<std::string>();
      }
    }
  }
  ASSERT_FALSE(mount.empty()) << "the ConfigMap is not mounted in the container";
  const std::vector<std::string> command = container["command"].as<std::vector<std::string>>();
  EXPECT_EQ(command[0], "haproxy");
  std::vector<std::string> read;
  for (size_t i = 0; i + 1 < command.size(); ++i) {
    if (command[i] == "-f") read.push_back(command[i + 1]);
  }
  EXPECT_THAT(read, ElementsAre(mount + "/haproxy.cfg", mount + "/replicas.cfg"));
  std::map<std::string, int> ports;
  for (const YAML::Node& port : container["ports"]) {
    ports[port["name"].as<std::string>()] = port["containerPort"].as<int>();
  }
  std::map<std::string, std::string> env;
  for (const YAML::Node& variable : container["env"]) {
    env[variable["name"].as<std::string>()] = variable["value"].as<std::string>();
  }
  EXPECT_EQ(env["ATTNSCOPE_BALANCER_LISTEN"], absl::StrCat(":", ports.at("grpc")));
  EXPECT_EQ(env["ATTNSCOPE_BALANCER_STATS"], absl::StrCat(":", ports.at("stats")));
  for (const char* probe : {"readinessProbe", "livenessProbe"}) {
    EXPECT_EQ(container[probe]["httpGet"]["port"].as<std::string>(""), "stats") << probe;
    EXPECT_EQ(container[probe]["httpGet"]["path"].as<std::string>(""), "/stats") << probe;
  }
  const YAML::Node service = balancer.One("Service");
  const std::map<std::string, std::string> labels = StringMap(pod["metadata"]["labels"]);
  for (const auto& [key, value] : StringMap(service["spec"]["selector"])) {
    EXPECT_EQ(labels.count(key) ? labels.at(key) : "", value) << "Service selector " << key;
  }
  for (const YAML::Node& port : service["spec"]["ports"]) {
    const std::string target = port["targetPort"].as<std::string>("");
    ASSERT_TRUE(ports.count(target)) << "the Service targets port '" << target << "'";
    EXPECT_EQ(port["port"].as<int>(), ports.at(target));
  }

  // HAProxy accepts the two files together.
  TempDir dir;
  for (const auto& [name, text] : files) std::ofstream(dir.path() + "/" + name) << text;
  const CommandResult check = RunCommand(
      {kHaproxy, "-c", "-f", dir.path() + "/haproxy.cfg", "-f", dir.path() + "/replicas.cfg"});
  EXPECT_EQ(check.exit_code, 0) << check.stdout_text << check.stderr_text;
}

TEST(K8sKedaTest, ScaledObjectTakesOverTheAutoscalerAndQueriesServedSeries) {
  const Manifests base;
  const Manifests keda(K8sDir() + "/keda");
  ASSERT_EQ(keda.Kinds(), std::set<std::string>{"ScaledObject"});
  const YAML::Node scaled = keda.One("ScaledObject");
  const YAML::Node hpa = base.One("HorizontalPodAutoscaler");
  const YAML::Node spec = scaled["spec"];
  EXPECT_EQ(spec["scaleTargetRef"]["kind"].as<std::string>(""), "Deployment");
  EXPECT_EQ(spec["scaleTargetRef"]["name"].as<std::string>(""),
            base.One("Deployment")["metadata"]["name"].as<std::string>());
  EXPECT_EQ(spec["minReplicaCount"].as<int>(), hpa["spec"]["minReplicas"].as<int>());
  EXPECT_EQ(spec["maxReplicaCount"].as<int>(), hpa["spec"]["maxReplicas"].as<int>());
  // It adopts hpa.yaml's autoscaler rather than adding a second one that would fight it.
  const YAML::Node hpa_config = spec["advanced"]["horizontalPodAutoscalerConfig"];
  EXPECT_EQ(hpa_config["name"].as<std::string>(""), hpa["metadata"]["name"].as<std::string>());
  EXPECT_EQ(scaled["metadata"]["annotations"]["scaledobject.keda.sh/transfer-hpa-ownership"]
                .as<std::string>(""),
            "true");
  EXPECT_EQ(hpa_config["behavior"]["scaleDown"]["stabilizationWindowSeconds"].as<int>(),
            hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"].as<int>());

  // The real server's series, after a call (the queue wait is observed by a forward pass).
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  v1::GetAttentionRequest attention;
  attention.set_model("bert");
  attention.set_text("the capital of france");
  ASSERT_TRUE((*server)->NewClient()->GetAttention(attention).ok());
  absl::StatusOr<std::string> metrics = HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  std::set<std::string> served;
  for (const MetricSample& sample : ParseMetrics(*metrics)) served.insert(sample.name);

  std::set<std::string> queried;
  double cpu_target = 0;
  for (const YAML::Node& trigger : spec["triggers"]) {
    const std::string type = trigger["type"].as<std::string>("");
    double threshold = 0;
    if (type == "cpu") {
      EXPECT_EQ(trigger["metricType"].as<std::string>(""), "Utilization");
      ASSERT_TRUE(absl::SimpleAtod(trigger["metadata"]["value"].as<std::string>(""), &cpu_target));
      continue;
    }
    ASSERT_EQ(type, "prometheus");
    const std::string query = trigger["metadata"]["query"].as<std::string>("");
    ASSERT_TRUE(absl::SimpleAtod(trigger["metadata"]["threshold"].as<std::string>(""), &threshold))
        << query;
    EXPECT_GT(threshold, 0) << query;
    const std::regex series(R"((attnscope_\w+)\{([^}]*)\})");
    int names = 0;
    for (auto it = std::sregex_iterator(query.begin(), query.end(), series);
         it != std::sregex_iterator(); ++it, ++names) {
      const std::string name = (*it)[1].str();
      EXPECT_TRUE(served.count(name)) << name << " in '" << query << "' is not a served series";
      // The job deploy/prometheus/alerts.yml selects.
      EXPECT_EQ((*it)[2].str(), "job=\"attnscope\"") << query;
      queried.insert(name);
    }
    EXPECT_GT(names, 0) << "no attnscope series in '" << query << "'";
    // Calls in flight are summed over the pods and divided among them (AverageValue): a
    // replica's share stays below where it refuses calls.
    if (absl::StrContains(query, "attnscope_inflight_requests")) {
      EXPECT_EQ(trigger["metricType"].as<std::string>(""), "AverageValue");
      EXPECT_LT(threshold, std::stod(ConfigMapFlag(base, "max_concurrent_requests")));
    }
  }
  EXPECT_TRUE(queried.count("attnscope_inflight_requests"));
  EXPECT_TRUE(queried.count("attnscope_queue_wait_seconds_sum"));
  EXPECT_TRUE(queried.count("attnscope_queue_wait_seconds_count"));
  EXPECT_EQ(cpu_target,
            hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"].as<double>());
}

}  // namespace
}  // namespace attnscope::testing
