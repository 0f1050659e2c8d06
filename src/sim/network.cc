#include "sim/network.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace weft {

Network::Network(LinkSet links) : link_set_(std::move(links)) {
  if (link_set_.name.size() != link_set_.capacity.size()) {
    throw std::logic_error(fmt::format("Network: {} link capacities but {} link names",
                                       link_set_.capacity.size(), link_set_.name.size()));
  }
  for (size_t l = 0; l < link_set_.capacity.size(); ++l) {
    const double c = link_set_.capacity[l];
    if (!(c > 0) || !std::isfinite(c)) {
      throw std::logic_error(fmt::format("Network: link {} ({}) has capacity {}", l,
                                         link_set_.name[l], c));
    }
  }
  links_.resize(link_set_.capacity.size());
}

namespace {

// Rates change now: bank the bytes moved at the old rate.
void bank(double& remaining, Seconds& since, double progress, Seconds now) {
  remaining = std::max(0.0, remaining - progress * (now - since));
  since = now;
}

// rate / stretch and remaining * stretch / rate, without the operations by a
// stretch of 1, which leave a double unchanged: the same numbers, fewer divisions.
double progress_of(BytesPerSecond rate, double stretch) { return stretch == 1 ? rate : rate / stretch; }
Seconds transfer_time(double remaining, double stretch, BytesPerSecond rate) {
  return (stretch == 1 ? remaining : remaining * stretch) / rate;
}


void check_stretch(Stretch stretch, std::string_view where) {
  for (const double s : {stretch.startup, stretch.transfer}) {
    if (!(s >= 1) || !std::isfinite(s)) {
      throw std::logic_error(fmt::format("Network::{} with stretch (startup {}, transfer {}); expected numbers >= 1",
                                         where, stretch.startup, stretch.transfer));
    }
  }
}

}  // namespace

Network::FlowId Network::start(Flow flow, Seconds now, Stretch stretch) {
  check_stretch(stretch, "start");
  if (!(now >= now_ && now <= next_event_)) {
    throw std::logic_error(fmt::format(
        "Network::start at {} s, outside [time {} s, next event {} s]", now, now_, next_event_));
  }
  if (!(flow.startup >= 0) || !(flow.volume >= 0) || !std::isfinite(flow.startup) ||
      !std::isfinite(flow.volume) || !(flow.weight > 0) || !std::isfinite(flow.weight)) {
    throw std::logic_error(fmt::format("Network::start: flow with startup {} s, volume {}, weight {}",
                                       flow.startup, flow.volume, flow.weight));
  }
  if (flow.links.empty() && flow.volume > 0) {
    throw std::logic_error(fmt::format("Network::start: {} bytes over no link", flow.volume));
  }
  for (int l : flow.links) {
    if (l < 0 || l >= static_cast<int>(links_.size())) {
      throw std::logic_error(
          fmt::format("Network::start: link {} of a network of {} links", l, links_.size()));
    }
  }

  FlowId id;
  if (free_ids_.empty()) {
    id = static_cast<FlowId>(flows_.size());
    flows_.emplace_back();
  } else {
    id = free_ids_.back();
    free_ids_.pop_back();
  }
  FlowState& f = flows_[static_cast<size_t>(id)];
  f.phase = Phase::kStartup;
  f.startup_end = now + flow.startup * stretch.startup;
  f.stretch = stretch;
  f.weight = flow.weight;
  f.volume = flow.volume;
  f.n_links = static_cast<int>(flow.links.size());
  if (f.n_links <= kInlineLinks) {
    std::copy(flow.links.begin(), flow.links.end(), f.inline_links.begin());
  } else {
    f.more_links = std::move(flow.links);
  }
  ++in_flight_;
  if (clock_link_ >= 0) tick(now);
  now_ = now;
  // A flow without startup begins transferring at once, so that the rates of the
  // others change now rather than at a separate event.
  if (flow.startup == 0 && flow.volume > 0) {
    if (begin_transfer(id)) {
      next_event_ = std::min(compute_rates(), next_startup_end());
    } else {
      move_alone(id);
      update_next_event();
    }
  } else {
    // The rates, hence the other flows' finish times, are unchanged.
    starting_.push_back(id);
    next_event_ = std::min(next_event_, f.startup_end);
  }
  return id;
}

const std::vector<Network::FlowId>& Network::advance(Seconds t) {
  if (!(t >= now_ && t <= next_event_)) {
    throw std::logic_error(fmt::format(
        "Network::advance to {} s, outside [time {} s, next event {} s]", t, now_, next_event_));
  }
  // Ids reported by the previous call become reusable only now, so that a caller
  // may start flows while it walks that list.
  free_ids_.insert(free_ids_.end(), finished_.begin(), finished_.end());
  finished_.clear();
  if (clock_link_ >= 0) tick(t);
  now_ = t;
  // `finish` (or the clock's first tag) is what next_event() is the minimum of, so
  // the flow that defined it finishes exactly at t, whatever the rounding.
  if (t >= first_finish_ && clock_link_ >= 0) {
    clock_ = std::max(clock_, by_tag_.begin()->first);
    while (!by_tag_.empty() && by_tag_.begin()->first <= clock_) {
      finished_.push_back(by_tag_.begin()->second);
      by_tag_.erase(by_tag_.begin());
    }
  } else if (t >= first_finish_) {  // else no transfer ends now: only startups do
    for (const Transfer& x : transfers_) {
      if (x.finish <= t) finished_.push_back(x.id);
    }
  }
  bool changed = !finished_.empty();
  bool shared = false;  // whether another flow's rate may change (Note [Flows alone])
  for (FlowId id : finished_) shared |= end_transfer(id);

  begun_.clear();
  for (size_t i = 0; i < starting_.size();) {
    const FlowId id = starting_[i];
    if (flows_[static_cast<size_t>(id)].startup_end > t) {
      ++i;
      continue;
    }
    starting_[i] = starting_.back();
    starting_.pop_back();
    changed = true;
    if (flows_[static_cast<size_t>(id)].volume == 0) {
      finished_.push_back(id);  // nothing to send: done when its startup ends
    } else {
      shared |= begin_transfer(id);
      begun_.push_back(id);
    }
  }
  for (FlowId id : finished_) release(id);
  if (changed) {
    if (shared) {
      next_event_ = std::min(compute_rates(), next_startup_end());
    } else {
      for (FlowId id : begun_) move_alone(id);
      update_next_event();
    }
  }
  return finished_;
}

void Network::set_stretch(FlowId id, Stretch stretch, Seconds now) {
  check_stretch(stretch, "set_stretch");
  if (!(now >= now_ && now <= next_event_)) {
    throw std::logic_error(fmt::format(
        "Network::set_stretch at {} s, outside [time {} s, next event {} s]", now, now_, next_event_));
  }
  if (!in_flight(id)) {
    throw std::logic_error(fmt::format("Network::set_stretch of flow {}, which is not in flight", id));
  }
  FlowState& f = flows_[static_cast<size_t>(id)];
  if (stretch == f.stretch) return;
  if (clock_link_ >= 0) tick(now);
  now_ = now;
  if (f.phase == Phase::kTransfer && clock_link_ >= 0) {
    Transfer& x = transfers_[f.position];
    by_tag_.erase({x.tag, id});
    x.tag = clock_ + std::max(0.0, x.tag - clock_) / x.stretch * stretch.transfer;
    x.stretch = stretch.transfer;
    by_tag_.emplace(x.tag, id);
    f.stretch = stretch;
    update_next_event();
    return;
  }
  Seconds& event = f.phase == Phase::kStartup ? f.startup_end : transfers_[f.position].finish;
  const Seconds old_event = event;
  if (f.phase == Phase::kStartup) {
    f.startup_end = now + (f.startup_end - now) / f.stretch.startup * stretch.startup;
  } else {
    Transfer& x = transfers_[f.position];
    x.remaining = std::max(0.0, x.remaining - x.progress * (now - x.since));
    x.since = now;
    x.finish = now + x.remaining * stretch.transfer / x.rate;
    first_finish_ = std::min(first_finish_, x.finish);
    x.stretch = stretch.transfer;
    x.progress = progress_of(x.rate, x.stretch);
  }
  f.stretch = stretch;
  // next_event_ is the minimum over all flows; only this flow's event moved. If
  // it did not define the minimum, the others' minimum is next_event_ itself.
  if (old_event > next_event_) {
    next_event_ = std::min(next_event_, event);
  } else {
    update_next_event();
  }
}

Seconds Network::busy_time(int link, Seconds at) const {
  if (!(at >= now_ && at <= next_event_)) {
    throw std::logic_error(fmt::format(
        "Network::busy_time at {} s, outside [time {} s, next event {} s]", at, now_, next_event_));
  }
  const LinkState& s = links_[static_cast<size_t>(link)];
  return s.busy_total + (s.transferring > 0 ? at - s.busy_since : 0.0);
}

bool Network::begin_transfer(FlowId id) {
  FlowState& f = flows_[static_cast<size_t>(id)];
  if (clock_link_ >= 0 && (f.n_links != 1 || f.links()[0] != clock_link_)) stop_clock();
  f.phase = Phase::kTransfer;
  f.position = transfers_.size();
  transfers_.push_back({.remaining = f.volume, .since = now_, .rate = 0, .progress = 0, .finish = kNever,
                        .weight = f.weight, .stretch = f.stretch.transfer, .id = id});
  if (clock_link_ >= 0) {
    transfers_.back().tag = clock_ + f.volume * f.stretch.transfer / f.weight;
    by_tag_.emplace(transfers_.back().tag, id);
  }
  if (f.n_links != 1) ++multi_link_transfers_;
  if (f.weight == std::floor(f.weight)) {
    weight_sum_ += f.weight;
    weight_sum_exact_ &= weight_sum_ < kExactSum;
  } else {
    ++inexact_weights_;
  }
  bool shared = false;
  for (int l : f.links()) {
    LinkState& s = links_[static_cast<size_t>(l)];
    if (s.transferring++ == 0) s.busy_since = now_;
    shared |= s.transferring > 1;
    s.peak = std::max(s.peak, s.transferring);
  }
  return shared;
}

bool Network::end_transfer(FlowId id) {
  FlowState& f = flows_[static_cast<size_t>(id)];
  bool shared = false;
  for (int l : f.links()) {
    LinkState& s = links_[static_cast<size_t>(l)];
    if (--s.transferring == 0) s.busy_total += now_ - s.busy_since;
    shared |= s.transferring > 0;
  }
  if (f.n_links != 1) --multi_link_transfers_;
  if (f.weight == std::floor(f.weight)) {
    weight_sum_ -= f.weight;
  } else {
    --inexact_weights_;
  }
  if (clock_link_ >= 0) by_tag_.erase({transfers_[f.position].tag, id});
  // Swap-remove: O(1), and the order stays a deterministic function of the calls.
  transfers_[f.position] = transfers_.back();
  flows_[static_cast<size_t>(transfers_[f.position].id)].position = f.position;
  transfers_.pop_back();
  if (transfers_.empty()) clock_link_ = -1;
  return shared;
}

// Note [Flows alone]: a flow that shares none of its links moves at its
// narrowest one, whatever its weight.
void Network::move_alone(FlowId id) {
  const FlowState& f = flows_[static_cast<size_t>(id)];
  Transfer& x = transfers_[f.position];
  double rate = kNever;
  for (int l : f.links()) rate = std::min(rate, link_set_.capacity[static_cast<size_t>(l)]);
  x.rate = rate;
  x.progress = progress_of(x.rate, x.stretch);
  x.since = now_;
  x.finish = now_ + transfer_time(x.remaining, x.stretch, x.rate);
  first_finish_ = std::min(first_finish_, x.finish);
}

void Network::release(FlowId id) {
  FlowState& f = flows_[static_cast<size_t>(id)];
  f.phase = Phase::kFree;
  f.more_links.clear();
  --in_flight_;
}


// Progressive filling: repeatedly find the link whose remaining capacity per unit
// of its unfrozen flows' weight is smallest; that share times a flow's weight is
// the weighted max-min fair rate of each of those flows, which are then frozen and
// their rate taken off every link they cross. Flows are grouped by link first, so that freezing a bottleneck visits
// only its own flows.
Seconds Network::compute_rates() {
  Seconds next = kNever;
  if (transfers_.empty()) return next;
  const int first_link = flows_[static_cast<size_t>(transfers_[0].id)].links()[0];
  const bool one_link = multi_link_transfers_ == 0 &&
      links_[static_cast<size_t>(first_link)].transferring == static_cast<int>(transfers_.size());
  if (one_link && inexact_weights_ == 0 && weight_sum_exact_) {
    if (clock_link_ != first_link) {
      if (clock_link_ >= 0) stop_clock();
      start_clock(first_link);
    }
    clock_share_ = link_set_.capacity[static_cast<size_t>(first_link)] / weight_sum_;
    first_finish_ = clock_finish(by_tag_.begin()->first);
    return first_finish_;
  }
  if (clock_link_ >= 0) stop_clock();
  if (one_link) {
    // Fractional weights on one link: it is the only bottleneck and one share
    // freezes every flow, as the general loop below would, in the same order.
    double weights = 0;
    for (const Transfer& x : transfers_) weights += x.weight;
    const double share = link_set_.capacity[static_cast<size_t>(first_link)] / weights;
    for (Transfer& x : transfers_) {
      bank(x.remaining, x.since, x.progress, now_);
      x.rate = share * x.weight;
      x.progress = progress_of(x.rate, x.stretch);
      x.finish = x.remaining == 0 ? now_ : now_ + transfer_time(x.remaining, x.stretch, x.rate);
      next = std::min(next, x.finish);
    }
    first_finish_ = next;
    return next;
  }

  ++mark_;
  touched_links_.clear();
  for (Transfer& x : transfers_) {
    bank(x.remaining, x.since, x.progress, now_);
    x.frozen = false;
    for (int l : flows_[static_cast<size_t>(x.id)].links()) {
      LinkState& s = links_[static_cast<size_t>(l)];
      if (s.mark != mark_) {
        s.mark = mark_;
        s.capacity_left = link_set_.capacity[static_cast<size_t>(l)];
        s.unfrozen = 0;
        s.unfrozen_weight = 0;
        touched_links_.push_back(l);
      }
      ++s.unfrozen;
      s.unfrozen_weight += x.weight;
    }
  }
  int offset = 0;
  for (int l : touched_links_) {
    LinkState& s = links_[static_cast<size_t>(l)];
    s.first = s.fill = offset;
    offset += s.unfrozen;
  }
  flows_by_link_.resize(static_cast<size_t>(offset));
  for (size_t p = 0; p < transfers_.size(); ++p) {
    for (int l : flows_[static_cast<size_t>(transfers_[p].id)].links()) {
      flows_by_link_[static_cast<size_t>(links_[static_cast<size_t>(l)].fill++)] = p;
    }
  }

  size_t unfrozen = transfers_.size();
  while (unfrozen > 0) {
    int bottleneck = -1;
    double share = kNever;
    for (int l : touched_links_) {
      const LinkState& s = links_[static_cast<size_t>(l)];
      if (s.unfrozen > 0 && s.capacity_left / s.unfrozen_weight < share) {
        share = s.capacity_left / s.unfrozen_weight;  // per unit of weight
        bottleneck = l;
      }
    }
    if (bottleneck < 0) {
      throw std::logic_error(fmt::format(
          "Network: {} transferring flows left without a bottleneck link", unfrozen));
    }
    const LinkState& b = links_[static_cast<size_t>(bottleneck)];
    for (int i = b.first; i < b.fill; ++i) {
      Transfer& x = transfers_[flows_by_link_[static_cast<size_t>(i)]];
      if (x.frozen) continue;
      x.frozen = true;
      x.rate = share * x.weight;
      x.progress = progress_of(x.rate, x.stretch);
      x.finish = x.remaining == 0 ? now_ : now_ + transfer_time(x.remaining, x.stretch, x.rate);
      next = std::min(next, x.finish);
      --unfrozen;
      for (int l : flows_[static_cast<size_t>(x.id)].links()) {
        LinkState& s = links_[static_cast<size_t>(l)];
        s.capacity_left = std::max(0.0, s.capacity_left - x.rate);
        --s.unfrozen;
        // Exactly 0 once the last is frozen, whatever the rounding of the sums.
        s.unfrozen_weight = s.unfrozen == 0 ? 0 : std::max(0.0, s.unfrozen_weight - x.weight);
      }
    }
  }
  first_finish_ = next;
  return next;
}

Seconds Network::next_startup_end() const {
  Seconds next = kNever;
  for (FlowId id : starting_) next = std::min(next, flows_[static_cast<size_t>(id)].startup_end);
  return next;
}

void Network::update_next_event() {
  Seconds next = next_startup_end();
  first_finish_ = kNever;
  if (clock_link_ >= 0) {
    if (!by_tag_.empty()) first_finish_ = clock_finish(by_tag_.begin()->first);
  } else {
    for (const Transfer& x : transfers_) first_finish_ = std::min(first_finish_, x.finish);
  }
  next_event_ = std::min(next, first_finish_);
}

// Note [One link, one clock]: the flows' bytes become tags, V starting from 0.
void Network::start_clock(int link) {
  clock_link_ = link;
  clock_ = 0;
  clock_since_ = now_;
  by_tag_.clear();
  for (Transfer& x : transfers_) {
    bank(x.remaining, x.since, x.progress, now_);
    x.tag = x.remaining * x.stretch / x.weight;
    by_tag_.emplace(x.tag, x.id);
  }
}

// The tags become bytes again, and each flow's rate and finish what the clock
// gave them. REQUIRES: tick(now_) done.
void Network::stop_clock() {
  for (Transfer& x : transfers_) {
    x.remaining = std::max(0.0, x.tag - clock_) * x.weight / x.stretch;
    x.since = now_;
    x.rate = clock_share_ * x.weight;
    x.progress = progress_of(x.rate, x.stretch);
    x.finish = clock_finish(x.tag);
  }
  clock_link_ = -1;
  by_tag_.clear();
}

void Network::tick(Seconds t) {
  clock_ += (t - clock_since_) * clock_share_;
  clock_since_ = t;
}

Seconds Network::clock_finish(double tag) const {
  return clock_since_ + std::max(0.0, tag - clock_) / clock_share_;
}

}  // namespace weft
