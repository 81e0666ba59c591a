// Transport security and caller authentication of attnscope-server: TLS (optionally mutual) for
// the gRPC and HTTP listeners, and API keys sent as `authorization: Bearer <key>` (RFC 6750), the
// scheme text-embeddings-inference and OpenAI-style APIs use.
#ifndef ATTNSCOPE_SERVER_SECURITY_H_
#define ATTNSCOPE_SERVER_SECURITY_H_

#include <openssl/ssl.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnscope::server {

// PEM files for TLS. Either both cert_file and key_file are set (TLS) or neither (plaintext);
// client_ca_file additionally requires and verifies a client certificate signed by that CA.
struct TlsOptions {
  // --tls_cert_file: the server's certificate chain.
  std::string cert_file;
  // --tls_key_file: its private key.
  std::string key_file;
  // --tls_client_ca_file: CA certificates that sign accepted client certificates (mutual TLS).
  std::string client_ca_file;

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// InvalidArgument when only one of cert_file and key_file is set, or client_ca_file without them,
// or when a file is not what OpenSSL reads as its kind (a PEM certificate, an unencrypted PEM
// private key, PEM CA certificates) or the key is not the certificate's; NotFound (or
// PermissionDenied) when a file cannot be read. The message names the flag.
absl::Status ValidateTlsOptions(const TlsOptions& options);

// Sets up `context`, an OpenSSL server context, for `options` (enabled): its certificate chain and
// key, and where client_ca_file is set, client certificates required and verified against it (and
// its names offered to clients). InvalidArgument naming the flags when OpenSSL cannot use the
// files together.
absl::Status ConfigureServerTls(const TlsOptions& options, SSL_CTX* context);

// The keys of --api_keys_file. Only SHA-256 digests are kept, and a presented key is compared with
// every one of them with CRYPTO_memcmp, so the time a check takes says nothing about how much of a
// key was right, nor which key matched.
class ApiKeys {
 public:
  // One key per line; surrounding whitespace is ignored, as are empty lines and lines starting
  // with '#', and a UTF-8 byte order mark at the start. NotFound or PermissionDenied: the file
  // cannot be read. InvalidArgument: it holds no key, or a key with whitespace inside (it could
  // never be sent in a header).
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Create(const std::string& file);

  // True when `authorization` (the header's value) is "Bearer <key>" for one of the keys; the
  // scheme is case-insensitive as RFC 7235 says.
  bool Accepts(absl::string_view authorization) const { return Find(authorization).has_value(); }
  // Which key `authorization` carries: its line among the file's keys (0 = the first), or nullopt
  // when it carries none of them. Compares with every key in constant time.
  std::optional<int> Find(absl::string_view authorization) const;

  size_t size() const { return digests_.size(); }

 private:
  using Digest = std::array<unsigned char, 32>;
  explicit ApiKeys(std::vector<Digest> digests) : digests_(std::move(digests)) {}

  std::vector<Digest> digests_;
};

}  // namespace attnscope::server

#endif  // ATTNSCOPE_SERVER_SECURITY_H_
