// deploy/'s monitoring, checked with the real tools against a real server:
// - `docker-compose config` accepts deploy/docker-compose.yml, every file it mounts exists, and its
//   ports, Prometheus' scrape targets, the balanced profile (replicas behind HAProxy) and Grafana's
//   provisioning agree with each other and with the Dockerfile;
// - `promtool check config`, `check rules` and `test rules` accept deploy/prometheus, and every
// alert
//   has a unit test in which it fires;
// - Debian's Prometheus, run on a copy of the shipped config aimed at a live attnscope-server,
//   scrapes it while gRPC (client library) and HTTP/JSON calls go in, then evaluates every
//   expression of the Grafana dashboard and of the alert rules through /api/v1/query: no errors,
//   data in every panel, traffic in the traffic panels; every attnscope_ name they use is one the
//   server exports, and the down alert's condition turns true when the server stops.
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/deploy_util.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;
using ::testing::UnorderedElementsAre;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kPromtool[] = "/usr/bin/promtool";
constexpr char kDockerCompose[] = "/usr/bin/docker-compose";

std::string DeployDir() { return SourceDir() + "/deploy"; }
std::string PrometheusDir() { return DeployDir() + "/prometheus"; }

// A tool the tests need; a missing one is a failure that says how to get it, never a skip.
void ExpectTool(const char* path, const char* package) {
  ASSERT_TRUE(fs::exists(path)) << path << " is missing: scripts/install-deps.sh installs it "
                                << "(Debian package " << package << ")";
}

YAML::Node LoadYaml(const std::string& path) {
  try {
    return YAML::LoadFile(path);
  } catch (const YAML::Exception& error) {
    ADD_FAILURE() << path << ": " << error.what();
    return YAML::Node();
  }
}

json LoadJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTextFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  json parsed = json::parse(text.ok() ? *text : "", nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(parsed.is_discarded()) << path << " is not valid JSON";
  return parsed;
}

// One PromQL expression of the dashboard or the rules, and where it comes from.
struct Expression {
  std::string where;
  std::string expr;
};

// The dashboard's panels: title -> the expressions of its targets.
std::map<std::string, std::vector<std::string>> DashboardPanels() {
  std::map<std::string, std::vector<std::string>> panels;
  const json dashboard = LoadJson(DeployDir() + "/grafana/dashboards/attnscope.json");
  for (const json& panel : dashboard.value("panels", json::array())) {
    std::vector<std::string>& exprs = panels[panel.value("title", "")];
    for (const json& target : panel.value("targets", json::array())) {
      exprs.push_back(target.value("expr", ""));
    }
  }
  return panels;
}

// alert name -> expression, from deploy/prometheus/alerts.yml.
std::map<std::string, std::string> AlertRules() {
  std::map<std::string, std::string> rules;
  const YAML::Node file = LoadYaml(PrometheusDir() + "/alerts.yml");
  for (const YAML::Node& group : file["groups"]) {
    for (const YAML::Node& rule : group["rules"]) {
      rules[rule["alert"].as<std::string>("")] = rule["expr"].as<std::string>("");
    }
  }
  return rules;
}

std::vector<Expression> AllExpressions() {
  std::vector<Expression> all;
  for (const auto& [title, exprs] : DashboardPanels()) {
    for (const std::string& expr : exprs) all.push_back({"dashboard panel '" + title + "'", expr});
  }
  for (const auto& [alert, expr] : AlertRules()) all.push_back({"alert " + alert, expr});
  return all;
}

TEST(ComposeTest, ConfigValidatesAndItsPiecesAgree) {
  ExpectTool(kDockerCompose, "docker-compose");
  const CommandResult config =
      RunCommand({kDockerCompose, "-f", DeployDir() + "/docker-compose.yml", "config"});
  ASSERT_EQ(config.exit_code, 0) << config.stderr_text;
  // The resolved file: relative paths made absolute, defaults filled in.
  const YAML::Node resolved = YAML::Load(config.stdout_text);
  const YAML::Node services = resolved["services"];
  std::set<std::string> names;
  for (const auto& service : services) names.insert(service.first.as<std::string>());
  EXPECT_THAT(names,
              UnorderedElementsAre("attnscope", "prometheus", "grafana", "replicas", "balancer"));

  EXPECT_EQ(fs::canonical(services["attnscope"]["build"]["context"].as<std::string>()),
            fs::canonical(SourceDir()));
  std::map<std::string, std::string> mounts;  // container path -> host path, every service
  for (const auto& service : services) {
    for (const YAML::Node& volume : service.second["volumes"]) {
      const std::vector<std::string> parts = absl::StrSplit(volume.as<std::string>(), ':');
      ASSERT_GE(parts.size(), 2u) << volume.as<std::string>();
      if (!absl::StartsWith(parts[0], "/")) continue;  // a named volume
      EXPECT_TRUE(fs::exists(parts[0]))
          << service.first << " mounts " << parts[0] << ", which does not exist";
      mounts[parts[1]] = parts[0];
    }
  }

  // attnscope publishes the ports the image's server listens on.
  const std::vector<DockerStage> stages =
      ParseDockerfile(ReadTextFile(SourceDir() + "/Dockerfile").value_or(""));
  ASSERT_FALSE(stages.empty());
  std::set<int> image_ports;
  for (const std::string& expose : stages.back().All("EXPOSE")) {
    for (const std::string& port : ExecForm(expose)) image_ports.insert(std::stoi(port));
  }
  // docker-compose 1.29 prints a port published on one address in the short form,
  // "127.0.0.1:8080:8080/tcp": loopback unless ATTNSCOPE_BIND_ADDRESS says otherwise.
  std::set<int> published;
  for (const YAML::Node& port : services["attnscope"]["ports"]) {
    std::smatch parts;
    const std::string text = port.as<std::string>("");
    ASSERT_TRUE(std::regex_match(text, parts, std::regex(R"(([0-9.]+):([0-9]+):([0-9]+)/tcp)")))
        << text;
    EXPECT_EQ(parts[1], "127.0.0.1") << text;
    EXPECT_EQ(parts[2], parts[3]) << text;
    published.insert(std::stoi(parts[3]));
  }
  EXPECT_EQ(published, image_ports);
  ASSERT_TRUE(image_ports.count(9464));

  // Prometheus scrapes the attnscope service on its metrics port, with the shipped config.
  EXPECT_EQ(mounts.at("/etc/prometheus"), fs::canonical(PrometheusDir()).string());
  const YAML::Node prometheus = LoadYaml(PrometheusDir() + "/prometheus.yml");
  ASSERT_EQ(prometheus["scrape_configs"].size(), 1u);
  const YAML::Node job = prometheus["scrape_configs"][0];
  EXPECT_EQ(job["job_name"].as<std::string>(""), "attnscope") << "the alert rules select it";
  EXPECT_EQ(job["static_configs"][0]["targets"][0].as<std::string>(""), "attnscope:9464");
  // ... and the balanced profile's replicas, each by its address from Docker's DNS.
  EXPECT_EQ(job["dns_sd_configs"][0]["names"][0].as<std::string>(""), "replicas");
  EXPECT_EQ(job["dns_sd_configs"][0]["port"].as<int>(0), 9464);

  // The balanced profile: replicas of the same image that publish no port, behind HAProxy given
  // the shipped balancer config and the compose backend, published on loopback.
  for (const char* service : {"replicas", "balancer"}) {
    EXPECT_THAT(services[service]["profiles"].as<std::vector<std::string>>(),
                ElementsAre("balanced"))
        << service;
  }
  EXPECT_EQ(services["replicas"]["image"].as<std::string>(""),
            services["attnscope"]["image"].as<std::string>(""));
  EXPECT_FALSE(services["replicas"]["ports"]) << "three replicas cannot publish one port";
  EXPECT_EQ(services["replicas"]["deploy"]["replicas"].as<int>(0), 3);
  EXPECT_EQ(mounts.at("/usr/local/etc/haproxy"), fs::canonical(DeployDir() + "/haproxy").string());
  EXPECT_THAT(services["balancer"]["command"].as<std::vector<std::string>>(),
              IsSupersetOf({"/usr/local/etc/haproxy/haproxy.cfg",
                            "/usr/local/etc/haproxy/replicas-compose.cfg"}));
  std::vector<std::string> balancer_ports;
  for (const YAML::Node& port : services["balancer"]["ports"]) {
    balancer_ports.push_back(port.as<std::string>(""));
  }
  EXPECT_THAT(balancer_ports,
              UnorderedElementsAre("127.0.0.1:50052:50051/tcp", "127.0.0.1:8404:8404/tcp"));

  // Grafana: the data source points at the prometheus service, the provider at the mounted
  // dashboards, and every panel at the provisioned data source.
  const std::string provisioning = mounts.at("/etc/grafana/provisioning");
  const YAML::Node datasources = LoadYaml(provisioning + "/datasources/prometheus.yml");
  const YAML::Node datasource = datasources["datasources"][0];
  EXPECT_EQ(datasource["url"].as<std::string>(""), "http://prometheus:9090");
  EXPECT_THAT(services["prometheus"]["command"].as<std::vector<std::string>>(),
              Contains("--config.file=/etc/prometheus/prometheus.yml"));
  const YAML::Node providers = LoadYaml(provisioning + "/dashboards/attnscope.yml");
  const std::string dashboards_path =
      providers["providers"][0]["options"]["path"].as<std::string>("");
  ASSERT_TRUE(mounts.count(dashboards_path)) << dashboards_path << " is not mounted";
  EXPECT_TRUE(fs::exists(mounts.at(dashboards_path) + "/attnscope.json"));
  const json dashboard = LoadJson(DeployDir() + "/grafana/dashboards/attnscope.json");
  ASSERT_FALSE(dashboard.value("panels", json::array()).empty());
  for (const json& panel : dashboard["panels"]) {
    EXPECT_EQ(panel["datasource"]["uid"], datasource["uid"].as<std::string>(""))
        << panel.value("title", "");
    EXPECT_FALSE(panel.value("targets", json::array()).empty()) << panel.value("title", "");
  }
}

TEST(PromtoolTest, AcceptsTheConfigAndTheRulesAndEveryAlertIsUnitTested) {
  ExpectTool(kPromtool, "prometheus");
  const CommandResult config =
      RunCommand({kPromtool, "check", "config", PrometheusDir() + "/prometheus.yml"});
  EXPECT_EQ(config.exit_code, 0) << config.stdout_text << config.stderr_text;
  EXPECT_THAT(config.stdout_text, HasSubstr("SUCCESS: 1 rule files found"));
  const CommandResult rules =
      RunCommand({kPromtool, "check", "rules", PrometheusDir() + "/alerts.yml"});
  EXPECT_EQ(rules.exit_code, 0) << rules.stdout_text << rules.stderr_text;
  EXPECT_THAT(rules.stdout_text,
              HasSubstr(absl::StrCat("SUCCESS: ", AlertRules().size(), " rules found")));
  const CommandResult unit =
      RunCommand({kPromtool, "test", "rules", PrometheusDir() + "/alerts_test.yml"});
  EXPECT_EQ(unit.exit_code, 0) << unit.stdout_text << unit.stderr_text;
  EXPECT_THAT(unit.stdout_text, HasSubstr("SUCCESS"));

  // Each alert fires in at least one test case and stays silent in another.
  std::map<std::string, std::pair<int, int>> cases;  // alert -> (firing, silent)
  const YAML::Node tests = LoadYaml(PrometheusDir() + "/alerts_test.yml");
  for (const YAML::Node& test : tests["tests"]) {
    for (const YAML::Node& check : test["alert_rule_test"]) {
      auto& [firing, silent] = cases[check["alertname"].as<std::string>("")];
      (check["exp_alerts"].size() > 0 ? firing : silent)++;
    }
  }
  ASSERT_FALSE(AlertRules().empty());
  for (const auto& [alert, expr] : AlertRules()) {
    EXPECT_GT(cases[alert].first, 0) << alert << " never fires in alerts_test.yml";
    EXPECT_GT(cases[alert].second, 0) << alert << " is never checked silent in alerts_test.yml";
  }
}

// Prometheus' answer to an instant query.
struct QueryResult {
  std::string error;  // empty on success
  std::vector<double> values;
};

class LivePrometheus {
 public:
  // Starts Prometheus on a copy of deploy/prometheus/prometheus.yml whose targets are
  // 127.0.0.1:metrics_port, scraping and evaluating every second.
  void Start(int metrics_port) {
    YAML::Node config = LoadYaml(PrometheusDir() + "/prometheus.yml");
    config["global"]["scrape_interval"] = "1s";
    config["global"]["scrape_timeout"] = "1s";
    config["global"]["evaluation_interval"] = "1s";
    // Relative rule files are read from the config's folder, which the copy is not in.
    for (size_t i = 0; i < config["rule_files"].size(); ++i) {
      config["rule_files"][i] = PrometheusDir() + "/" + config["rule_files"][i].as<std::string>();
    }
    for (YAML::Node job : config["scrape_configs"]) {
      for (YAML::Node targets : job["static_configs"]) {
        targets["targets"] = std::vector<std::string>{absl::StrCat("127.0.0.1:", metrics_port)};
      }
      // The compose replicas' name would be asked of this machine's resolver.
      job.remove("dns_sd_configs");
    }
    const std::string config_path = dir_.path() + "/prometheus.yml";
    std::ofstream(config_path) << YAML::Dump(config);
    port_ = FreeTcpPort();
    absl::StatusOr<std::unique_ptr<BackgroundProcess>> process = BackgroundProcess::Start(
        {kPrometheus, "--config.file=" + config_path,
         "--storage.tsdb.path=" + dir_.path() + "/data",
         absl::StrCat("--web.listen-address=127.0.0.1:", port_), "--log.level=warn"});
    ASSERT_TRUE(process.ok()) << process.status();
    process_ = *std::move(process);
    ASSERT_TRUE(WaitFor("Prometheus ready", absl::Seconds(60),
                        [&] { return HttpGet(port_, "/-/ready").ok(); }));
  }

  QueryResult Query(const std::string& expr) const {
    absl::StatusOr<HttpAnswer> answer = HttpPostForm(port_, "/api/v1/query", {{"query", expr}});
    if (!answer.ok()) return {answer.status().ToString(), {}};
    const json body = json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
    if (answer->status != 200 || body.value("status", "") != "success") {
      return {absl::StrCat("HTTP ", answer->status, ": ", answer->body), {}};
    }
    QueryResult result;
    const json& data = body["data"];
    auto add = [&result](const json& value) {
      double number = 0;
      // Values come as strings: "1.5", "NaN", "+Inf".
      if (value.size() == 2 && absl::SimpleAtod(value[1].get<std::string>(), &number)) {
        result.values.push_back(number);
      }
    };
    if (data["resultType"] == "vector") {
      for (const json& sample : data["result"]) add(sample["value"]);
    } else if (data["resultType"] == "scalar") {
      add(data["result"]);
    } else {
      result.error = "unexpected result type " + data["resultType"].dump();
    }
    return result;
  }

  // The single value of `expr`, or NaN.
  double Value(const std::string& expr) const {
    const QueryResult result = Query(expr);
    return result.values.size() == 1 ? result.values[0] : NAN;
  }

  template <typename Predicate>
  bool WaitFor(const std::string& what, absl::Duration timeout, Predicate done) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (done()) return true;
      if (process_ && !process_->Running()) {
        ADD_FAILURE() << "prometheus exited while waiting for: " << what << "\n" << Log();
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << "timed out after " << absl::FormatDuration(timeout) << " waiting for: " << what
                  << "\n"
                  << Log();
    return false;
  }

  int port() const { return port_; }
  std::string Log() const { return process_ ? process_->Log() : ""; }

 private:
  TempDir dir_;
  int port_ = 0;
  std::unique_ptr<BackgroundProcess> process_;
};

// The sum of attnscope_requests_total in one scrape of the server.
double RequestsTotal(int metrics_port) {
  absl::StatusOr<std::string> body = HttpGet(metrics_port, "/metrics");
  EXPECT_TRUE(body.ok()) << body.status();
  double total = 0;
  for (const MetricSample& sample :
       FindSamples(ParseMetrics(body.value_or("")), "attnscope_requests_total")) {
    total += sample.value;
  }
  return total;
}

// One round of calls over both transports, successes and client errors.
void SendTraffic(Client& client, int http_port) {
  v1::GetAttentionRequest attention;
  attention.set_model("bert");
  attention.set_text("the capital of france is paris");
  ASSERT_TRUE(client.GetAttention(attention).ok());
  ASSERT_TRUE(client.StreamAttention(attention).ok());
  v1::TokenizeRequest tokenize;
  tokenize.set_model("bert");
  tokenize.set_text("Tôi yêu Việt Nam quá");
  ASSERT_TRUE(client.Tokenize(tokenize).ok());
  v1::EncodeRequest encode;
  encode.set_model("bert");
  encode.add_inputs()->set_text("paris");
  encode.add_inputs()->set_text("the river");
  ASSERT_TRUE(client.Encode(encode).ok());
  v1::CrossAttentionRequest cross;
  cross.set_model("bert");
  cross.set_query("capital of france");
  cross.add_documents("paris is the capital of france");
  ASSERT_TRUE(client.CrossAttention(cross).ok());
  attention.set_model("missing");
  ASSERT_EQ(client.GetAttention(attention).status().code(), absl::StatusCode::kNotFound);

  const std::string prefix = "/attnscope.v1.AttentionService/";
  const std::vector<std::pair<std::string, json>> http_calls = {
      {"Tokenize", {{"model", "bert"}, {"text", "나는 오늘 랭체인을 공부한다"}}},
      {"GetAttention", {{"model", "bert"}, {"text", "hello world"}}},
      {"ListModels", json::object()},
  };
  for (const auto& [method, body] : http_calls) {
    absl::StatusOr<HttpAnswer> answer = HttpPost(http_port, prefix + method, body.dump());
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 200) << method << ": " << answer->body;
  }
  absl::StatusOr<HttpAnswer> missing =
      HttpPost(http_port, prefix + "Tokenize", R"({"model": "missing", "text": "x"})");
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_EQ(missing->status, 404) << missing->body;
}

TEST(LivePrometheusTest, EvaluatesEveryDashboardAndAlertExpressionOnRealTraffic) {
  ExpectTool(kPrometheus, "prometheus");
  ServerProcess::Options options;
  options.models = {"bert=" + TinyBertDir()};
  options.metrics_port = FreeTcpPort();
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const int metrics_port = (*server)->metrics_port();
  const int http_port = (*server)->http_port();
  ASSERT_GT(http_port, 0);

  LivePrometheus prometheus;
  ASSERT_NO_FATAL_FAILURE(prometheus.Start(metrics_port));
  ASSERT_TRUE(prometheus.WaitFor("target up", absl::Seconds(30),
                                 [&] { return prometheus.Value(R"(up{job="attnscope"})") == 1; }));

  // Rounds a scrape apart, so that counters rise between samples and rates are positive.
  std::unique_ptr<Client> client = (*server)->NewClient();
  for (int round = 0; round < 4; ++round) {
    ASSERT_NO_FATAL_FAILURE(SendTraffic(*client, http_port));
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }
  const double sent = RequestsTotal(metrics_port);
  EXPECT_EQ(sent, 4 * (6 + 4));
  ASSERT_TRUE(prometheus.WaitFor("the last round scraped", absl::Seconds(30), [&] {
    return prometheus.Value("sum(attnscope_requests_total)") == sent;
  }));
  // Both transports arrived with their own label.
  EXPECT_EQ(prometheus.Value(R"(sum(attnscope_requests_total{transport="http"}))"), 4 * 4);
  EXPECT_EQ(prometheus.Value(R"(sum(attnscope_requests_total{transport="grpc"}))"), 4 * 6);

  // Grafana's $__rate_interval is at least four scrape intervals; 30 s covers the whole traffic.
  auto grafana_to_promql = [](const std::string& expr) {
    return absl::StrReplaceAll(expr, {{"$__rate_interval", "30s"}});
  };
  // Panels whose true value for this traffic is 0: nothing rejected, no server error, nothing in
  // flight between calls.
  const std::set<std::string> zero_now = {"Admission rejections by reason", "Server error ratio",
                                          "In-flight requests"};
  const auto panels = DashboardPanels();
  ASSERT_GE(panels.size(), 10u);
  for (const auto& [title, exprs] : panels) {
    bool positive = false;
    for (const std::string& expr : exprs) {
      const std::string promql = grafana_to_promql(expr);
      EXPECT_THAT(promql, ::testing::Not(HasSubstr("$")))
          << "panel '" << title << "' uses a Grafana variable this test cannot evaluate";
      const QueryResult result = prometheus.Query(promql);
      EXPECT_EQ(result.error, "") << title << ": " << promql;
      EXPECT_FALSE(result.values.empty()) << "panel '" << title << "' has no data: " << promql;
      for (double value : result.values) positive = positive || (std::isfinite(value) && value > 0);
    }
    if (zero_now.count(title)) continue;
    EXPECT_TRUE(positive) << "panel '" << title << "' shows no traffic";
  }
  EXPECT_EQ(prometheus.Value(grafana_to_promql(panels.at("Server error ratio").at(0))), 0);

  for (const auto& [alert, expr] : AlertRules()) {
    const QueryResult result = prometheus.Query(expr);
    EXPECT_EQ(result.error, "") << alert << ": " << expr;
    EXPECT_TRUE(result.values.empty()) << alert << " holds for a healthy server: " << expr;
  }
  // Prometheus loaded the rules and evaluates them without errors.
  ASSERT_TRUE(prometheus.WaitFor("every rule evaluated", absl::Seconds(30), [&] {
    const json rules = json::parse(HttpGet(prometheus.port(), "/api/v1/rules").value_or(""),
                                   nullptr, /*allow_exceptions=*/false);
    if (rules.is_discarded()) return false;
    size_t ok = 0;
    for (const json& group : rules["data"]["groups"]) {
      for (const json& rule : group["rules"]) {
        ok += rule.value("health", "") == "ok" && rule.value("lastError", "").empty();
      }
    }
    return ok == AlertRules().size();
  }));

  // Every attnscope_ name the dashboard and the rules use is one the server exports, and the only
  // other series they select is Prometheus' own `up`.
  absl::StatusOr<std::string> scrape = HttpGet(metrics_port, "/metrics");
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  std::set<std::string> exported;
  for (const MetricSample& sample : ParseMetrics(*scrape)) exported.insert(sample.name);
  const std::regex attnscope_name(R"(\battnscope_[a-z0-9_]+)");
  const std::regex selector(R"(\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{)");
  std::set<std::string> used;
  for (const Expression& expression : AllExpressions()) {
    for (std::sregex_iterator it(expression.expr.begin(), expression.expr.end(), attnscope_name);
         it != std::sregex_iterator(); ++it) {
      used.insert(it->str());
      EXPECT_TRUE(exported.count(it->str()))
          << expression.where << " uses " << it->str() << ", which the server does not export";
    }
    for (std::sregex_iterator it(expression.expr.begin(), expression.expr.end(), selector);
         it != std::sregex_iterator(); ++it) {
      const std::string name = (*it)[1];
      EXPECT_TRUE(absl::StartsWith(name, "attnscope_") || name == "up")
          << expression.where << " selects " << name << ", which is not attnscope's";
    }
  }
  for (const char* name : {"attnscope_requests_total", "attnscope_request_duration_seconds_bucket",
                           "attnscope_input_tokens_sum", "attnscope_queue_wait_seconds_bucket",
                           "attnscope_inflight_requests", "attnscope_process_resident_memory_bytes",
                           "attnscope_rejected_requests_total"}) {
    EXPECT_TRUE(used.count(name)) << "the dashboard and the rules never show " << name;
  }

  // The down alert's condition turns true once the server is gone.
  const std::string down = AlertRules().at("AttnscopeDown");
  (*server)->Signal(SIGTERM);
  ASSERT_TRUE((*server)->Wait(absl::Seconds(30)).ok());
  EXPECT_TRUE(prometheus.WaitFor("AttnscopeDown's condition", absl::Seconds(30),
                                 [&] { return prometheus.Query(down).values.size() == 1; }));
}

}  // namespace
}  // namespace attnscope::testing
