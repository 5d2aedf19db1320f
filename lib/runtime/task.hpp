// Task<T>: the C++20 coroutine type of rdtx. A Task is lazy: it starts when
// awaited (or when spawned on a Worker) and resumes its awaiter by symmetric
// transfer when it finishes, so deep call chains of coroutines use no stack.
// Frames come from the current worker's FramePool.
// Exceptions are not part of the hot path: an exception escaping a task
// terminates the process with the standard handler.
// Thread-safety: a task runs on the thread of the worker that spawned it.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <utility>

#include "runtime/frame_pool.hpp"

namespace rdtx::runtime {

template <typename T>
class Task;

namespace detail {

struct PromiseBase {
  std::coroutine_handle<> continuation;

  static void* operator new(size_t n) { return FramePool::allocate_frame(n); }
  static void operator delete(void* p) { FramePool::deallocate_frame(p); }

  std::suspend_always initial_suspend() noexcept { return {}; }
  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <typename P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      auto c = h.promise().continuation;
      return c ? c : std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() { std::terminate(); }
};

template <typename T>
struct Promise : PromiseBase {
  std::optional<T> value;
  Task<T> get_return_object();
  template <typename U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
};

template <>
struct Promise<void> : PromiseBase {
  Task<void> get_return_object();
  void return_void() {}
};

}  // namespace detail

template <typename T = void>
class [[nodiscard]] Task {
 public:
  using promise_type = detail::Promise<T>;
  using Handle = std::coroutine_handle<promise_type>;

  Task() = default;
  explicit Task(Handle h) : h_(h) {}
  Task(Task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Task& operator=(Task&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() {
    if (h_) h_.destroy();
  }

  bool done() const { return !h_ || h_.done(); }
  Handle release() { return std::exchange(h_, {}); }

  struct Awaiter {
    Handle h;
    bool await_ready() const noexcept { return !h || h.done(); }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
      h.promise().continuation = awaiting;
      return h;
    }
    T await_resume() {
      if constexpr (!std::is_void_v<T>) return std::move(*h.promise().value);
    }
  };
  Awaiter operator co_await() && noexcept { return Awaiter{h_}; }

 private:
  Handle h_;
};

namespace detail {
template <typename T>
Task<T> Promise<T>::get_return_object() {
  return Task<T>(std::coroutine_handle<Promise<T>>::from_promise(*this));
}
inline Task<void> Promise<void>::get_return_object() {
  return Task<void>(std::coroutine_handle<Promise<void>>::from_promise(*this));
}
}  // namespace detail

}  // namespace rdtx::runtime
