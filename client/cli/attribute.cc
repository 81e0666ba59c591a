// `attnscope attribute`: which tokens and words made a cross-encoder's score (Attribute), as tables
// or as the AttributeResponse in JSON.
#include <google/protobuf/util/json_util.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/attention_display.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "common/status_macros.h"

namespace attnscope::cli {
namespace {

struct Flags {
  TextInputFlags input;
  std::vector<v1::AttributionMethod> methods;
  std::optional<int32_t> steps;
  std::optional<int32_t> target;
  v1::OcclusionToken occlusion_token = v1::OCCLUSION_TOKEN_MASK;
  v1::AttributionBaseline baseline = v1::ATTRIBUTION_BASELINE_PAD;
  std::string format = "text";
};

absl::StatusOr<std::vector<v1::AttributionMethod>> ParseMethods(const std::string& text) {
  std::vector<v1::AttributionMethod> methods;
  for (absl::string_view method : absl::StrSplit(text, ',')) {
    if (method == "occlusion") {
      methods.push_back(v1::ATTRIBUTION_METHOD_OCCLUSION);
    } else if (method == "gradient_x_input") {
      methods.push_back(v1::ATTRIBUTION_METHOD_GRADIENT_X_INPUT);
    } else if (method == "integrated_gradients") {
      methods.push_back(v1::ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS);
    } else {
      return UsageError(absl::StrCat("--method: '", method, "' in '", text,
                                     "' is not one of occlusion, gradient_x_input, "
                                     "integrated_gradients"));
    }
  }
  return methods;
}

absl::StatusOr<v1::AttributeRequest> AttributeRequest(const Flags& flags) {
  v1::AttributeRequest request;
  ATTNSCOPE_RETURN_IF_ERROR(SetTextInput("attribute", flags.input, &request));
  for (v1::AttributionMethod method : flags.methods) request.add_methods(method);
  if (flags.steps.has_value()) request.set_integrated_gradients_steps(*flags.steps);
  if (flags.target.has_value()) request.set_target(*flags.target);
  request.set_occlusion_token(flags.occlusion_token);
  request.set_baseline(flags.baseline);
  return request;
}

absl::StatusOr<Output> RunAttribute(const Flags& flags, const CommandContext& context) {
  ATTNSCOPE_ASSIGN_OR_RETURN(v1::AttributeRequest request, AttributeRequest(flags));
  ATTNSCOPE_ASSIGN_OR_RETURN(v1::AttributeResponse response,
                             context.client.Attribute(request, context.call));
  if (flags.format == "text") {
    ATTNSCOPE_ASSIGN_OR_RETURN(std::string text, AttributionText(response));
    return TextOutput(std::move(text));
  }
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(response, &out, options).ok()) {
    return absl::InternalError("attribute: the answer could not be printed as JSON");
  }
  return JsonOutput(json::parse(out));
}

}  // namespace

Command AddAttributeCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "attribute",
      "which tokens and words made a cross-encoder's score (--text QUERY --text_pair DOC)");
  auto flags = std::make_shared<Flags>();
  AddTextInputFlags(*command, &flags->input);
  command->option_defaults()->group("Attribute");
  AddParsedFlag(*command, "--method", "integrated_gradients,occlusion,gradient_x_input",
                "the attribution methods, comma-separated (default all three)", &flags->methods,
                ParseMethods);
  AddInt32Flag(*command, "--steps", "N", "integrated-gradients steps (default 50, at most 1000)",
               &flags->steps);
  AddInt32Flag(*command, "--target", "N", "the classifier label to explain (default 0)",
               &flags->target);
  AddChoiceFlag<v1::OcclusionToken>(
      *command, "--occlusion_token", "what occlusion puts in a token's place (default mask)",
      {{"mask", v1::OCCLUSION_TOKEN_MASK}, {"unk", v1::OCCLUSION_TOKEN_UNK}},
      &flags->occlusion_token);
  AddChoiceFlag<v1::AttributionBaseline>(
      *command, "--baseline", "the integrated-gradients baseline (default pad)",
      {{"pad", v1::ATTRIBUTION_BASELINE_PAD}, {"zero", v1::ATTRIBUTION_BASELINE_ZERO}},
      &flags->baseline);
  AddChoiceFlag<std::string>(
      *command, "--format",
      "text (default): the score, then the words of --text_pair and of --text highest first, "
      "then every token; json: the AttributeResponse with snake_case field names",
      {{"text", "text"}, {"json", "json"}}, &flags->format);
  return {command,
          [flags](const CommandContext& context) { return RunAttribute(*flags, context); }};
}

}  // namespace attnscope::cli
