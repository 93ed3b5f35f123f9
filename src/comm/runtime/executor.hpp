#pragma once
// The process's communication thread. Every host collective is a task queued here and run
// in submission order, so all MPI calls a collective makes come from this one thread while
// the caller computes. Ranks must submit collectives on any shared group in the same order
// (as with MPI collectives); one FIFO thread then cannot deadlock across groups.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/api/work.hpp"

namespace strata::comm {

class CommThread {
 public:
  CommThread();
  ~CommThread();  // runs what is queued, then joins the thread
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  Work submit(std::function<void()> task);
  // True on the communication thread (algorithms assert they run there).
  bool on_comm_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

 private:
  struct Task;
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace strata::comm
