// Jobs run one after the other, in the order added, on a thread of their own;
// each job completes (or fails) its future. The codecs whose messages take several
// exchanges (runtime/comm/codecs.cc) and the sum by sites (runtime/comm/sites.h)
// run them here, so that the engine's thread never blocks, and so that the
// collectives of one group are issued in one order: the order jobs are added.
//
// Thread-safety: add() and track() from any thread; a job runs on the jobs' thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace weft::runtime {

class SerialJobs {
 public:
  using Future = c10::intrusive_ptr<c10::ivalue::Future>;
  using Work = c10::intrusive_ptr<c10d::Work>;

  SerialJobs() : thread_([this] { loop(); }) {}
  // Aborts the exchanges of the job in progress; the jobs not started never run
  // and their futures stay incomplete.
  ~SerialJobs() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (const Work& w : current_) w->abort();
    }
    changed_.notify_all();
    thread_.join();
  }
  Future add(std::function<void()> job) {
    auto done = c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get());
    {
      std::lock_guard lock(mutex_);
      queue_.emplace_back(std::move(job), done);
    }
    changed_.notify_all();
    return done;
  }
  // Registers an exchange a job has posted, to be aborted if the jobs are destroyed
  // while it is in flight; the registrations end with the job.
  Work track(Work work) {
    std::lock_guard lock(mutex_);
    if (stopping_) throw std::runtime_error("codec: stopped");
    current_.push_back(work);
    return work;
  }

 private:
  void loop() {
    for (;;) {
      std::pair<std::function<void()>, Future> next;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr error;
      try {
        next.first();
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        current_.clear();  // the job's exchanges and the buffers they hold go with it
      }
      if (error) {
        next.second->setError(error);
      } else {
        next.second->markCompleted(c10::IValue());
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<std::function<void()>, Future>> queue_;
  std::vector<Work> current_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace weft::runtime
