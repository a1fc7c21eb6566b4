// Who may call the REST API: bearer tokens from a file, each with a role, and the role each
// request needs.
//
// The tokens file (--auth-tokens-file, PSTRAIN_AUTH_TOKENS_FILE) has one token per line,
// `TOKEN,ROLE[,NAME]` (like Kubernetes' static token file): TOKEN 16 to 256 printable characters
// without spaces or commas, ROLE one of admin, operator, viewer, NAME a label for logs and
// metrics (never the token itself). Blank lines and lines starting with '#' are ignored. Every
// defect (an unknown role, a short token, a duplicate) fails the load, naming the line.
//
// Roles nest: viewer reads everything (jobs, metrics, datasets, models, event streams) and may
// run predictions and evaluations, which change nothing; operator also submits and cancels jobs
// and uploads datasets and models; admin also deletes. GET /healthz and the dashboard's static
// files (/, /ui/...) need no token: they hold no data, and a browser must load the page before
// it can send the token it holds.
//
// Tokens are compared in constant time: each presented token is hashed (SHA-256) and compared
// with every stored hash with CRYPTO_memcmp, all of them, whatever matches. Only the hashes are
// kept in memory.
//
// Thread rules: immutable after load; any thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain {

enum class Role { kViewer = 1, kOperator = 2, kAdmin = 3 };
const char* role_name(Role role);

class AccessTokens {
 public:
  // Throws pstrain::Error naming `source` and the line at fault.
  static AccessTokens parse(std::string_view text, const std::string& source);
  static AccessTokens load(const std::string& path);

  struct Match {
    Role role;
    std::string name;
  };
  // The role of `token`, or nullopt.
  std::optional<Match> find(std::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::array<uint8_t, 32> hash{};
    Role role = Role::kViewer;
    std::string name;
  };
  std::vector<Entry> entries_;
};

// The role a request needs (nullopt: none). `path` is the target's segments (split_path).
std::optional<Role> required_role(const std::string& method, const std::vector<std::string>& path);

}  // namespace pstrain
