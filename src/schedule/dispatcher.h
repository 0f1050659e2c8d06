// Dispatcher: the one interpretation of a Schedule's dispatch policy, shared by the
// simulator and the runtime's communication engine (Note [One schedule, two
// executors] in schedule.h).
//
// The dispatcher holds no clock. The executor tells it when an operation becomes
// ready (its data exists and its release offset has passed) and when a message has
// completed; after each *instant* it asks `launch()` which messages to start now.
// An instant is everything that happens at one time: all the ops that one layer's
// backward makes ready are marked ready() before launch() is called, or a window
// would leave with only the first of them (Note [Launch per instant]).
// One Dispatcher serves one worker (all-reduce executors may use one for all,
// since every worker decides alike).
//
// Thread-safety: not thread-safe; the runtime calls it from its engine thread only.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

#include "schedule/schedule.h"

namespace weft {

// An operation of a global iteration: schedule.ops(iteration)[index].
struct OpRef {
  int iteration = 0;
  int index = 0;
  friend bool operator==(const OpRef&, const OpRef&) = default;
};

// Operations fused into one transfer, in the order their chunks are packed.
struct Message {
  std::vector<OpRef> ops;
  Bytes bytes = 0;
};

class Dispatcher {
 public:
  // REQUIRES: `schedule` outlives the dispatcher and passed validate().
  // `first_iteration`: the first iteration whose operations will be made ready (a
  // job resumed from a checkpoint starts later than 0).
  explicit Dispatcher(const Schedule& schedule, int first_iteration = 0);

  // `op` may now be sent. REQUIRES: each op is made ready once; iterations are made
  // ready in non-decreasing order of `iteration`.
  void ready(OpRef op);

  // A message returned by launch() has completed.
  void done(const Message& message);

  // The messages to start now, in order; may be empty. Call once after each
  // instant's ready() and done() calls. Messages it returns count as in flight
  // until done().
  //
  // Note [Launch per instant]: the window and credit policies choose among the ops
  // pending at the call. Both executors therefore make a whole layer's ops ready,
  // then call launch(): the simulator at the event time, the runtime engine when
  // the layer's backward hook fires.
  std::vector<Message> launch();

  // No op is ready-but-unsent and nothing is in flight.
  bool idle() const;

  Bytes bytes_in_flight() const { return in_flight_bytes_; }

 private:
  struct Pending {
    OpRef op;
    int priority;
    Bytes bytes;
  };
  // Earlier iterations first (they gate the forward that is due first), then
  // priority, then list order: a total order, so every worker decides alike.
  struct Before {
    bool operator()(const Pending& a, const Pending& b) const;
  };
  // An ordered set, not a sorted vector: a large model makes thousands of ops
  // ready at once, and each insertion and each send from the front must not move
  // the rest (O(log n) each, not O(n)).
  using PendingSet = std::set<Pending, Before>;

  std::vector<Message> launch_in_order();
  std::vector<Message> launch_credit();
  std::vector<Message> launch_windows();
  Message make_message(PendingSet::iterator first, PendingSet::iterator last);

  const Schedule& schedule_;
  PendingSet pending_;  // ready and unsent
  int in_flight_messages_ = 0;
  Bytes in_flight_bytes_ = 0;
  // kInOrder: the next operation to send, in (iteration, list) order.
  OpRef next_in_order_;
  // kWindows: messages already formed in each iteration.
  int window_iteration_ = -1;
  int windows_sent_ = 0;
};

}  // namespace weft
