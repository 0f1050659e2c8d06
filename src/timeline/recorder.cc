#include "timeline/recorder.h"

#include <utility>

namespace weft::runtime {

void Recorder::add(Event event) {
  if (!records(event.iteration)) return;
  event.worker = worker_;
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(event));
}

std::vector<Event> Recorder::take() {
  std::lock_guard lock(mutex_);
  return std::exchange(events_, {});
}

}  // namespace weft::runtime
