// Result<T>: a value or an Error carrying an errno-style code and a message
// that names the offending input. Used on control paths (setup, config,
// connection); fast paths return negative errno instead.
// Thread-safety: plain value types.
#pragma once

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <utility>
#include <variant>

namespace rdtx {

struct Error {
  int code = EINVAL;  // positive errno
  std::string message;
};

// printf-style constructor so call sites read like the message they produce.
[[gnu::format(printf, 2, 3)]] inline Error make_error(int code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return Error{code, buf};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error err) : v_(std::move(err)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error err) : err_(std::move(err)), ok_(false) {}

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return err_; }

 private:
  Error err_;
  bool ok_ = true;
};

}  // namespace rdtx

// Propagate an error from an expression returning Result<...>.
#define RDTX_TRY(expr)                          \
  do {                                          \
    auto&& rdtx_try_r_ = (expr);                \
    if (!rdtx_try_r_.ok()) return rdtx_try_r_.error(); \
  } while (0)
