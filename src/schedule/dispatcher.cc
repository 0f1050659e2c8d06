#include "schedule/dispatcher.h"

#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>

namespace weft {

bool Dispatcher::Before::operator()(const Pending& a, const Pending& b) const {
  if (a.op.iteration != b.op.iteration) return a.op.iteration < b.op.iteration;
  if (a.priority != b.priority) return a.priority < b.priority;
  return a.op.index < b.op.index;
}

Dispatcher::Dispatcher(const Schedule& schedule, int first_iteration)
    : schedule_(schedule), next_in_order_{first_iteration, 0} {}

// pending_ is ordered by Before, so launching is a walk from the front.
void Dispatcher::ready(OpRef op) {
  const CommOp& comm = schedule_.ops(op.iteration).at(static_cast<size_t>(op.index));
  pending_.insert(Pending{op, comm.priority, comm.bytes()});
}

void Dispatcher::done(const Message& message) {
  if (in_flight_messages_ <= 0) {
    throw std::logic_error("Dispatcher::done: no message in flight");
  }
  --in_flight_messages_;
  in_flight_bytes_ -= message.bytes;
}

bool Dispatcher::idle() const { return pending_.empty() && in_flight_messages_ == 0; }

std::vector<Message> Dispatcher::launch() {
  switch (schedule_.dispatch.kind) {
    case DispatchPolicy::Kind::kInOrder: return launch_in_order();
    case DispatchPolicy::Kind::kCredit: return launch_credit();
    case DispatchPolicy::Kind::kWindows: return launch_windows();
  }
  return {};
}

Message Dispatcher::make_message(PendingSet::iterator first, PendingSet::iterator last) {
  Message message;
  for (auto it = first; it != last; ++it) {
    message.ops.push_back(it->op);
    message.bytes += it->bytes;
  }
  pending_.erase(first, last);
  ++in_flight_messages_;
  in_flight_bytes_ += message.bytes;
  return message;
}

// One message at a time, in (iteration, list index) order. Iterations without
// operations are skipped, so a local-SGD period does not stall the order.
std::vector<Message> Dispatcher::launch_in_order() {
  std::vector<Message> out;
  if (in_flight_messages_ > 0) return out;
  while (static_cast<size_t>(next_in_order_.index) >= schedule_.ops(next_in_order_.iteration).size()) {
    // Only advance past an iteration once something of a later one is ready: the
    // executor makes iterations ready in order, so nothing earlier can still come.
    // pending_ is ordered by iteration first, so its last op has the latest.
    const bool later_ready =
        !pending_.empty() && std::prev(pending_.end())->op.iteration > next_in_order_.iteration;
    if (!later_ready) return out;
    next_in_order_ = {next_in_order_.iteration + 1, 0};
  }
  const CommOp& comm =
      schedule_.ops(next_in_order_.iteration)[static_cast<size_t>(next_in_order_.index)];
  auto it = pending_.find(Pending{next_in_order_, comm.priority, 0});
  if (it == pending_.end()) return out;
  ++next_in_order_.index;
  out.push_back(make_message(it, std::next(it)));
  return out;
}

std::vector<Message> Dispatcher::launch_credit() {
  std::vector<Message> out;
  const Bytes credit = schedule_.dispatch.credit;
  while (!pending_.empty()) {
    const Pending& head = *pending_.begin();
    if (in_flight_messages_ > 0 && in_flight_bytes_ + head.bytes > credit) break;
    out.push_back(make_message(pending_.begin(), std::next(pending_.begin())));
  }
  return out;
}

// D-Credit's windows: message k of an iteration fuses the best ready ops of the
// earliest iteration that has any, while they fit in windows[k] bytes (docs/strategies.md §4.2;
// Note [Windows of bytes] in schedulers/dcredit.cc).
std::vector<Message> Dispatcher::launch_windows() {
  std::vector<Message> out;
  if (in_flight_messages_ > 0 || pending_.empty()) return out;
  const int iteration = pending_.begin()->op.iteration;
  if (iteration != window_iteration_) {
    window_iteration_ = iteration;
    windows_sent_ = 0;
  }
  const std::vector<Bytes>& windows = schedule_.dispatch.windows;
  const size_t k = static_cast<size_t>(windows_sent_);
  const Bytes budget = k < windows.size() ? windows[k] : std::numeric_limits<Bytes>::max();
  auto last = std::next(pending_.begin());  // a window holds at least one op
  Bytes bytes = pending_.begin()->bytes;
  while (last != pending_.end() && last->op.iteration == iteration && last->bytes <= budget - bytes) {
    bytes += last->bytes;
    ++last;
  }
  ++windows_sent_;
  out.push_back(make_message(pending_.begin(), last));
  return out;
}

}  // namespace weft
