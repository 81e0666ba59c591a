#include "server/security.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace attnscope::server {
namespace {

// The file a flag names; errors as ReadFileToString's, with the flag in front.
absl::StatusOr<std::string> ReadFile(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileToString(path, kMaxSettingsFileBytes);
  if (!contents.ok()) {
    return absl::Status(contents.status().code(),
                        absl::StrCat(flag, " ", contents.status().message(),
                                     "; check the path and its permissions"));
  }
  return contents;
}

}  // namespace

namespace {

X509* PemCertificate(BIO* bio) { return PEM_read_bio_X509(bio, nullptr, nullptr, nullptr); }
EVP_PKEY* PemPrivateKey(BIO* bio) {
  return PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
}

// The first object `read` finds in `pem`, or null; OpenSSL's error queue is left empty.
template <typename T>
T* ReadPem(const std::string& pem, T* (*read)(BIO*)) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  T* object = bio == nullptr ? nullptr : read(bio.get());
  ERR_clear_error();
  return object;
}

}  // namespace

absl::Status ValidateTlsOptions(const TlsOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_cert_file '", options.cert_file, "' and --tls_key_file '",
                     options.key_file, "': expected both (TLS) or neither (plaintext), got one"));
  }
  if (!options.client_ca_file.empty() && !options.enabled()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_client_ca_file '", options.client_ca_file,
                     "': expected --tls_cert_file and --tls_key_file with it (mutual TLS is TLS "
                     "with client certificates), got neither"));
  }
  if (!options.enabled()) return absl::OkStatus();
  // gRPC reads the files only when the server starts, and a failure there looked like an address
  // that cannot be bound; each file is read here as OpenSSL will read it, naming its flag.
  ATTNSCOPE_ASSIGN_OR_RETURN(const std::string cert_pem,
                             ReadFile("--tls_cert_file", options.cert_file));
  ATTNSCOPE_ASSIGN_OR_RETURN(const std::string key_pem,
                             ReadFile("--tls_key_file", options.key_file));
  std::unique_ptr<X509, decltype(&X509_free)> cert(ReadPem(cert_pem, &PemCertificate), &X509_free);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert_file '", options.cert_file,
        "': expected a PEM certificate (-----BEGIN CERTIFICATE-----), got none OpenSSL reads"));
  }
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(ReadPem(key_pem, &PemPrivateKey),
                                                          &EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key_file '", options.key_file,
        "': expected an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----), got none "
        "OpenSSL reads"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_key_file '", options.key_file, "': expected the private key of --tls_cert_file '",
        options.cert_file, "', got another key"));
  }
  if (!options.client_ca_file.empty()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(const std::string ca_pem,
                               ReadFile("--tls_client_ca_file", options.client_ca_file));
    std::unique_ptr<X509, decltype(&X509_free)> ca(ReadPem(ca_pem, &PemCertificate), &X509_free);
    if (ca == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_client_ca_file '", options.client_ca_file,
          "': expected PEM CA certificates (-----BEGIN CERTIFICATE-----), got none OpenSSL reads"));
    }
  }
  return absl::OkStatus();
}

absl::Status ConfigureServerTls(const TlsOptions& options, SSL_CTX* context) {
  SSL_CTX_set_options(context, SSL_OP_ALL);
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  bool usable =
      SSL_CTX_use_certificate_chain_file(context, options.cert_file.c_str()) == 1 &&
      SSL_CTX_use_PrivateKey_file(context, options.key_file.c_str(), SSL_FILETYPE_PEM) == 1 &&
      SSL_CTX_check_private_key(context) == 1;
  if (usable && !options.client_ca_file.empty()) {
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.client_ca_file.c_str());
    usable = SSL_CTX_load_verify_locations(context, options.client_ca_file.c_str(), nullptr) == 1 &&
             names != nullptr;
    if (names != nullptr) SSL_CTX_set_client_CA_list(context, names);
    SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  ERR_clear_error();
  if (!usable) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert_file '", options.cert_file, "' and --tls_key_file '", options.key_file,
        "': expected a PEM certificate and its private key (and a PEM CA in "
        "--tls_client_ca_file), got files OpenSSL cannot use together"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Create(const std::string& file) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::string contents, ReadFile("--api_keys_file", file));
  // Editors on Windows start a UTF-8 file with a byte order mark; it would become part of the first
  // key, which then never matched.
  if (absl::StartsWith(contents, "\xEF\xBB\xBF")) contents.erase(0, 3);
  std::vector<Digest> digests;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(contents, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    for (const char c : line) {
      if (absl::ascii_isspace(static_cast<unsigned char>(c))) {
        return absl::InvalidArgumentError(
            absl::StrCat("--api_keys_file '", file, "' line ", line_number,
                         ": expected one key without whitespace, got several words"));
      }
      // A header value carries visible ASCII only (gRPC refuses to send anything else), so such
      // a key could never be presented.
      if (!absl::ascii_isgraph(static_cast<unsigned char>(c))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--api_keys_file '", file, "' line ", line_number,
            ": expected a key of visible ASCII characters (it is sent in a header), got byte 0x",
            absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2)));
      }
    }
    Digest digest;
    SHA256(reinterpret_cast<const unsigned char*>(line.data()), line.size(), digest.data());
    digests.push_back(digest);
  }
  if (digests.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--api_keys_file '", file, "': expected at least one key (one per line), got none"));
  }
  return std::unique_ptr<ApiKeys>(new ApiKeys(std::move(digests)));
}

std::optional<int> ApiKeys::Find(absl::string_view authorization) const {
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return std::nullopt;
  }
  const absl::string_view key = absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
  Digest presented;
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), presented.data());
  int found = -1;
  for (size_t i = 0; i < digests_.size(); ++i) {
    const bool match = CRYPTO_memcmp(presented.data(), digests_[i].data(), digests_[i].size()) == 0;
    found = match ? static_cast<int>(i) : found;
  }
  if (found < 0) return std::nullopt;
  return found;
}

}  // namespace attnscope::server
