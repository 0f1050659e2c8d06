#include "sim/network.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
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

Network::FlowId Network::start(Flow flow, Seconds now) {
  if (!(now >= now_ && now <= next_event_)) {
    throw std::logic_error(fmt::format(
        "Network::start at {} s, outside [time {} s, next event {} s]", now, now_, next_event_));
  }
  if (!(flow.startup >= 0) || !(flow.volume >= 0) || !std::isfinite(flow.startup) ||
      !std::isfinite(flow.volume)) {
    throw std::logic_error(fmt::format("Network::start: flow with startup {} s, volume {}",
                                       flow.startup, flow.volume));
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
  progress_to(now);

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
  f.startup_end = now + flow.startup;
  f.remaining = flow.volume;
  f.rate = 0;
  f.links = std::move(flow.links);
  ++in_flight_;
  // A flow without startup begins transferring at once, so that the rates of the
  // others change now rather than at a separate event.
  if (flow.startup == 0 && flow.volume > 0) {
    begin_transfer(id);
    compute_rates();
  } else {
    starting_.push_back(id);
  }
  update_next_event();
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
  // Decide who finishes from the finish times as of the previous event: that is the
  // expression next_event() was the minimum of, so the flow that defined it finishes
  // exactly, whatever rounding progress_to() leaves in `remaining`.
  for (FlowId id : transferring_) {
    if (finish_time(flows_[static_cast<size_t>(id)]) <= t) finished_.push_back(id);
  }
  progress_to(t);
  bool changed = !finished_.empty();
  for (FlowId id : finished_) end_transfer(id);

  for (size_t i = 0; i < starting_.size();) {
    const FlowId id = starting_[i];
    if (flows_[static_cast<size_t>(id)].startup_end > t) {
      ++i;
      continue;
    }
    starting_[i] = starting_.back();
    starting_.pop_back();
    changed = true;
    if (flows_[static_cast<size_t>(id)].remaining == 0) {
      finished_.push_back(id);  // nothing to send: done when its startup ends
    } else {
      begin_transfer(id);
    }
  }
  for (FlowId id : finished_) {
    FlowState& f = flows_[static_cast<size_t>(id)];
    f.phase = Phase::kFree;
    f.rate = 0;
    f.links.clear();
    --in_flight_;
  }
  if (changed) compute_rates();
  update_next_event();
  return finished_;
}

Seconds Network::busy_time(int link, Seconds at) const {
  if (!(at >= now_ && at <= next_event_)) {
    throw std::logic_error(fmt::format(
        "Network::busy_time at {} s, outside [time {} s, next event {} s]", at, now_, next_event_));
  }
  const LinkState& s = links_[static_cast<size_t>(link)];
  return s.busy_total + (s.transferring > 0 ? at - s.busy_since : 0.0);
}

Seconds Network::finish_time(const FlowState& f) const {
  if (f.remaining == 0) return now_;
  return f.rate > 0 ? now_ + f.remaining / f.rate : kNever;
}

void Network::progress_to(Seconds t) {
  const Seconds dt = t - now_;
  if (dt > 0) {
    for (FlowId id : transferring_) {
      FlowState& f = flows_[static_cast<size_t>(id)];
      f.remaining = std::max(0.0, f.remaining - f.rate * dt);
    }
  }
  now_ = t;
}

void Network::begin_transfer(FlowId id) {
  FlowState& f = flows_[static_cast<size_t>(id)];
  f.phase = Phase::kTransfer;
  transferring_.push_back(id);
  for (int l : f.links) {
    LinkState& s = links_[static_cast<size_t>(l)];
    if (s.transferring++ == 0) s.busy_since = now_;
    s.peak = std::max(s.peak, s.transferring);
  }
}

void Network::end_transfer(FlowId id) {
  FlowState& f = flows_[static_cast<size_t>(id)];
  for (int l : f.links) {
    LinkState& s = links_[static_cast<size_t>(l)];
    if (--s.transferring == 0) s.busy_total += now_ - s.busy_since;
  }
  transferring_.erase(std::find(transferring_.begin(), transferring_.end(), id));
}

// Progressive filling: repeatedly find the link whose remaining capacity, split
// equally among its unfrozen flows, is smallest; that share is the max-min fair
// rate of those flows, which are then frozen and their rate taken off every link
// they cross.
void Network::compute_rates() {
  if (transferring_.empty()) return;
  ++mark_;
  touched_links_.clear();
  for (FlowId id : transferring_) {
    FlowState& f = flows_[static_cast<size_t>(id)];
    f.frozen = false;
    for (int l : f.links) {
      LinkState& s = links_[static_cast<size_t>(l)];
      if (s.mark != mark_) {
        s.mark = mark_;
        s.capacity_left = link_set_.capacity[static_cast<size_t>(l)];
        s.unfrozen = 0;
        touched_links_.push_back(l);
      }
      ++s.unfrozen;
    }
  }
  size_t unfrozen = transferring_.size();
  while (unfrozen > 0) {
    int bottleneck = -1;
    double share = kNever;
    for (int l : touched_links_) {
      const LinkState& s = links_[static_cast<size_t>(l)];
      if (s.unfrozen > 0 && s.capacity_left / s.unfrozen < share) {
        share = s.capacity_left / s.unfrozen;
        bottleneck = l;
      }
    }
    if (bottleneck < 0) {
      throw std::logic_error(fmt::format(
          "Network: {} transferring flows left without a bottleneck link", unfrozen));
    }
    for (FlowId id : transferring_) {
      FlowState& f = flows_[static_cast<size_t>(id)];
      if (f.frozen || std::find(f.links.begin(), f.links.end(), bottleneck) == f.links.end()) {
        continue;
      }
      f.frozen = true;
      f.rate = share;
      --unfrozen;
      for (int l : f.links) {
        LinkState& s = links_[static_cast<size_t>(l)];
        s.capacity_left = std::max(0.0, s.capacity_left - share);
        --s.unfrozen;
      }
    }
  }
}

void Network::update_next_event() {
  Seconds next = kNever;
  for (FlowId id : starting_) next = std::min(next, flows_[static_cast<size_t>(id)].startup_end);
  for (FlowId id : transferring_) next = std::min(next, finish_time(flows_[static_cast<size_t>(id)]));
  next_event_ = next;
}

}  // namespace weft
