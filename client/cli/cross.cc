// `attnscope cross`: CrossAttention, query-to-document attention of one query and one or more
// documents, with the relevance score of a cross-encoder.
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/attention_display.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "common/status_macros.h"

namespace attnscope::cli {
namespace {

struct Flags {
  std::string model;
  std::optional<std::string> query;
  std::vector<std::string> documents;
  TokenizationFlags tokenization;
  SelectionFlags selection;
  bool doc_to_query = false;
  v1::DType dtype = v1::DTYPE_FLOAT32;
  TextOutputFlags output;
};

absl::StatusOr<v1::CrossAttentionRequest> CrossRequest(const Flags& flags) {
  v1::CrossAttentionRequest request;
  request.set_model(flags.model);
  ATTNSCOPE_ASSIGN_OR_RETURN(*request.mutable_query(), Required("cross", "--query", flags.query));
  for (const std::string& document : flags.documents) request.add_documents(document);
  if (request.documents().empty()) return UsageError("'cross' needs --document (repeatable)");
  // Only send tokenization when asked, so that the server's documented default (longest_first at
  // the model's maximum) applies otherwise.
  if (flags.tokenization.given()) *request.mutable_tokenization() = flags.tokenization.ToProto();
  request.mutable_layers()->Add(flags.selection.layers.begin(), flags.selection.layers.end());
  request.mutable_heads()->Add(flags.selection.heads.begin(), flags.selection.heads.end());
  request.set_head_aggregation(flags.selection.aggregation);
  request.set_include_document_to_query(flags.doc_to_query);
  request.set_dtype(flags.dtype);
  return request;
}

absl::StatusOr<json> CrossToJson(const CrossAttentionResult& response, const TensorWriter& writer) {
  json out = {{"model", response.model},
              {"layers", response.layers},
              {"heads", response.heads},
              {"documents", json::array()}};
  for (size_t i = 0; i < response.documents.size(); ++i) {
    const DocumentAttentionResult& document = response.documents[i];
    json item = {{"tokens", TokensToJson(document.tokens)},
                 {"query_positions", document.query_positions},
                 {"document_positions", document.document_positions},
                 {"logits", document.logits}};
    if (document.relevance_score.has_value()) item["relevance_score"] = *document.relevance_score;
    const std::string prefix = absl::StrCat("document", i, "_");
    ATTNSCOPE_RETURN_IF_ERROR(
        writer.AddTo(item, "query_to_document", document.query_to_document, prefix));
    ATTNSCOPE_RETURN_IF_ERROR(
        writer.AddTo(item, "document_to_query", document.document_to_query, prefix));
    out["documents"].push_back(std::move(item));
  }
  return out;
}

}  // namespace

Command AddCrossCommand(CLI::App& app, std::optional<std::string>* npy_dir) {
  CLI::App* command = app.add_subcommand(
      "cross", "CrossAttention: query-to-document attention of one query and its documents");
  auto flags = std::make_shared<Flags>();
  AddModelFlag(*command, &flags->model);
  command->option_defaults()->group("Cross");
  AddStringFlag(*command, "--query", "Q", "the query", &flags->query);
  AddRepeatableFlag(*command, "--document", "D", "a document (repeatable)", &flags->documents);
  AddTokenizationFlags(*command, &flags->tokenization);
  AddSelectionFlags(*command, &flags->selection);
  command->option_defaults()->group("Cross");
  AddSwitch(*command, "--doc_to_query", "add the document-to-query block", &flags->doc_to_query);
  AddDTypeFlag(*command, &flags->dtype);
  AddNpyDirFlag(*command, npy_dir);
  AddTextOutputFlags(*command, &flags->output);
  return {command, [flags, npy_dir](const CommandContext& context) -> absl::StatusOr<Output> {
            ATTNSCOPE_ASSIGN_OR_RETURN(
                std::optional<int> text_rows,
                TextRows(flags->output, npy_dir->has_value(), /*scores=*/false));
            ATTNSCOPE_ASSIGN_OR_RETURN(v1::CrossAttentionRequest request, CrossRequest(*flags));
            ATTNSCOPE_ASSIGN_OR_RETURN(CrossAttentionResult response,
                                       context.client.CrossAttention(request, context.call));
            if (text_rows.has_value()) {
              ATTNSCOPE_ASSIGN_OR_RETURN(
                  std::string text,
                  CrossAttentionText(response, request.head_aggregation(), *text_rows));
              return TextOutput(std::move(text));
            }
            ATTNSCOPE_ASSIGN_OR_RETURN(json out, CrossToJson(response, context.writer));
            return JsonOutput(std::move(out));
          }};
}

}  // namespace attnscope::cli
