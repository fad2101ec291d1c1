// Defer: runs a callable when the scope ends, unless dismissed. For unwinding half-made state.
#pragma once

#include <utility>

namespace space {

template <class F>
class Defer {
 public:
  explicit Defer(F f) : f_(std::move(f)) {}
  Defer(const Defer&) = delete;
  Defer& operator=(const Defer&) = delete;
  ~Defer() {
    if (armed_) f_();
  }
  void dismiss() { armed_ = false; }

 private:
  F f_;
  bool armed_ = true;
};

}  // namespace space
