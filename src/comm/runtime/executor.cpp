#include "comm/runtime/executor.hpp"

#include <sys/prctl.h>

#include <cstdio>
#include <exception>

#include "base/error.hpp"

namespace strata::comm {

struct CommThread::Task final : WorkState {
  std::function<void()> fn;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;

  void wait() override {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }
  bool test() override {
    std::lock_guard lock(m);
    return done;
  }
};

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

Work CommThread::submit(std::function<void()> task) {
  auto t = std::make_shared<Task>();
  t->fn = std::move(task);
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw Error("comm: collective submitted while the communication thread stops");
    queue_.push_back(t);
  }
  wake_.notify_one();
  return Work(t);
}

void CommThread::loop() {
  // Sleeps on this thread (polling waits, link emulation) wake within microseconds rather
  // than the default 50 us timer slack.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  for (;;) {
    std::shared_ptr<Task> t;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      t = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      t->fn();
    } catch (...) {
      error = std::current_exception();
    }
    t->fn = nullptr;  // drop captured buffers before the waiter resumes
    {
      std::lock_guard lock(t->m);
      t->done = true;
      t->error = error;
    }
    t->cv.notify_all();
  }
}

}  // namespace strata::comm
