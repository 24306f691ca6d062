#include "directory/radix_tree.h"

#include <string>
#include <utility>

#include "base/check.h"

namespace rangekv::directory_internal {

uint64_t CommonPrefix(const int32_t* a, const int32_t* b, uint64_t n) {
  constexpr uint64_t kBlock = 64;
  uint64_t i = 0;
  while (i + kBlock <= n && std::memcmp(a + i, b + i, kBlock * sizeof(int32_t)) == 0) i += kBlock;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

RadixTree::RadixTree(const Limits& limits, uint32_t pack_slots, uint64_t tokens_per_pack)
    : limits_(limits), tokens_per_pack_(tokens_per_pack), packs_(pack_slots) {}

uint32_t RadixTree::FindRoot(const NamespaceId& ns) const {
  auto it = roots_.find(ns);
  return it == roots_.end() ? kNoNode : it->second;
}

uint32_t RadixTree::EnsureRoot(const NamespaceId& ns) {
  uint32_t root = FindRoot(ns);
  if (root != kNoNode) return root;
  RANGEKV_CHECK(roots_.size() < limits_.max_namespaces && nodes_in_use_ < limits_.max_nodes);
  root = NewNode();
  nodes_[root].ns = ns;
  roots_.emplace(ns, root);
  return root;
}

Status RadixTree::CheckCapacity(uint64_t new_nodes, uint64_t new_records, uint64_t new_tokens,
                                bool new_namespace) const {
  if (new_namespace && roots_.size() >= limits_.max_namespaces) {
    return ResourceExhausted("directory: namespace table full (" +
                             std::to_string(limits_.max_namespaces) + " namespaces)");
  }
  if (nodes_in_use_ + new_nodes > limits_.max_nodes) {
    return ResourceExhausted("directory: tree node bound reached (" +
                             std::to_string(nodes_in_use_) + " of " +
                             std::to_string(limits_.max_nodes) + " nodes in use, " +
                             std::to_string(new_nodes) + " needed)");
  }
  if (records_ + new_records > limits_.max_records) {
    return ResourceExhausted("directory: pack record bound reached (" + std::to_string(records_) +
                             " of " + std::to_string(limits_.max_records) + " records, " +
                             std::to_string(new_records) + " needed)");
  }
  if (live_tokens_ + new_tokens > limits_.max_label_tokens) {
    return ResourceExhausted(
        "directory: token arena bound reached (" + std::to_string(live_tokens_ * sizeof(int32_t)) +
        " of " + std::to_string(limits_.max_label_tokens * sizeof(int32_t)) + " bytes live, " +
        std::to_string(new_tokens * sizeof(int32_t)) + " needed)");
  }
  return OkStatus();
}

uint32_t RadixTree::NewNode() {
  uint32_t i;
  if (!free_nodes_.empty()) {
    i = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    i = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[i];
  n = Node();
  n.in_use = true;
  nodes_in_use_++;
  return i;
}

void RadixTree::FreeNode(uint32_t i) {
  Node& n = nodes_[i];
  if (n.slot != kNoSlot) records_--;
  n.in_use = false;
  n.children.clear();
  n.label_len = 0;
  nodes_in_use_--;
  free_nodes_.push_back(i);
}

uint64_t RadixTree::AllocLabel(const int32_t* src, uint64_t len) {
  const uint64_t garbage = arena_.size() - live_tokens_;
  if (garbage > live_tokens_ && garbage >= 1024) Compact(len);
  const uint64_t offset = arena_.size();
  arena_.insert(arena_.end(), src, src + len);
  live_tokens_ += len;
  return offset;
}

void RadixTree::Compact(uint64_t extra_tokens) {
  std::vector<int32_t> fresh;
  fresh.reserve(live_tokens_ + extra_tokens);
  for (Node& n : nodes_) {
    if (!n.in_use || n.label_len == 0) continue;
    const uint64_t offset = fresh.size();
    fresh.insert(fresh.end(), arena_.begin() + n.label_offset,
                 arena_.begin() + n.label_offset + n.label_len);
    n.label_offset = offset;
  }
  RANGEKV_CHECK(fresh.size() == live_tokens_);
  arena_.swap(fresh);
}

uint32_t RadixTree::FindChild(uint32_t node, int32_t token) const {
  const std::vector<uint32_t>& kids = nodes_[node].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), token, [this](uint32_t c, int32_t t) {
    return arena_[nodes_[c].label_offset] < t;
  });
  if (it == kids.end() || arena_[nodes_[*it].label_offset] != token) return kNoNode;
  return *it;
}

void RadixTree::InsertChild(uint32_t parent, uint32_t child) {
  const int32_t token = arena_[nodes_[child].label_offset];
  std::vector<uint32_t>& kids = nodes_[parent].children;
  auto it = std::lower_bound(kids.begin(), kids.end(), token, [this](uint32_t c, int32_t t) {
    return arena_[nodes_[c].label_offset] < t;
  });
  RANGEKV_CHECK(it == kids.end() || arena_[nodes_[*it].label_offset] != token);
  kids.insert(it, child);
}

void RadixTree::EraseChild(uint32_t parent, uint32_t child) {
  std::vector<uint32_t>& kids = nodes_[parent].children;
  for (auto it = kids.begin(); it != kids.end(); ++it) {
    if (*it == child) {
      kids.erase(it);
      return;
    }
  }
  RANGEKV_CHECK(false && "child not found under its parent");
}

uint32_t RadixTree::Split(uint32_t node, uint64_t k) {
  RANGEKV_CHECK(k > 0 && k < nodes_[node].label_len);
  RANGEKV_CHECK(nodes_in_use_ < limits_.max_nodes && records_ < limits_.max_records);
  const uint32_t lower = NewNode();  // may reallocate nodes_
  Node& up = nodes_[node];
  Node& lo = nodes_[lower];
  lo.parent = node;
  lo.slot = up.slot;
  lo.label_offset = up.label_offset + k;
  lo.label_len = static_cast<uint32_t>(up.label_len - k);
  lo.depth_begin = up.depth_begin + k;
  lo.pack_offset = up.pack_offset + k;
  lo.ns = up.ns;
  lo.children = std::move(up.children);
  up.children.clear();
  up.children.push_back(lower);
  up.label_len = static_cast<uint32_t>(k);
  for (uint32_t c : lo.children) nodes_[c].parent = lower;
  records_++;
  packs_[lo.slot].node_count++;
  return lower;
}

uint32_t RadixTree::Attach(uint32_t parent, std::span<const int32_t> label, uint32_t slot,
                           uint64_t pack_offset) {
  RANGEKV_CHECK(!label.empty() && slot < packs_.size());
  RANGEKV_CHECK(pack_offset + label.size() <= tokens_per_pack_);
  RANGEKV_CHECK(nodes_in_use_ < limits_.max_nodes && records_ < limits_.max_records);
  RANGEKV_CHECK(live_tokens_ + label.size() <= limits_.max_label_tokens);
  const uint64_t offset = AllocLabel(label.data(), label.size());
  const uint32_t i = NewNode();
  Node& n = nodes_[i];
  const Node& p = nodes_[parent];
  n.parent = parent;
  n.slot = slot;
  n.label_offset = offset;
  n.label_len = static_cast<uint32_t>(label.size());
  n.depth_begin = p.depth_end();
  n.pack_offset = pack_offset;
  n.ns = p.ns;
  records_++;
  Pack& pk = packs_[slot];
  if (pk.node_count == 0) {
    RANGEKV_CHECK(pack_offset == 0);
    pk.first_node = i;
    pk.path_begin = n.depth_begin;
    pk.ns = n.ns;
    pk.covered_tokens = 0;
    pk.foreign_children = 0;
  } else {
    RANGEKV_CHECK(p.slot == slot && p.pack_offset + p.label_len == pack_offset);
  }
  pk.node_count++;
  pk.covered_tokens += label.size();
  if (p.slot != kNoSlot && p.slot != slot) packs_[p.slot].foreign_children++;
  InsertChild(parent, i);
  return i;
}

void RadixTree::FreeDetached(uint32_t node, std::vector<uint32_t>* affected) {
  stack_.clear();
  stack_.push_back(node);
  while (!stack_.empty()) {
    const uint32_t y = stack_.back();
    stack_.pop_back();
    Node& n = nodes_[y];
    for (uint32_t z : n.children) {
      if (nodes_[z].slot != n.slot) packs_[n.slot].foreign_children--;
      stack_.push_back(z);
    }
    Pack& pk = packs_[n.slot];
    live_tokens_ -= n.label_len;
    pk.covered_tokens -= n.label_len;
    pk.node_count--;
    if (pk.node_count == 0) {
      pk.first_node = kNoNode;
      RANGEKV_CHECK(pk.covered_tokens == 0);
    }
    affected->push_back(n.slot);
    FreeNode(y);
  }
}

void RadixTree::DetachAndFree(uint32_t node, std::vector<uint32_t>* affected) {
  const uint32_t parent = nodes_[node].parent;
  EraseChild(parent, node);
  const uint32_t pslot = nodes_[parent].slot;
  if (pslot != kNoSlot && pslot != nodes_[node].slot) packs_[pslot].foreign_children--;
  FreeDetached(node, affected);
}

void RadixTree::RemoveSubtree(uint32_t node, std::vector<uint32_t>* affected) {
  RANGEKV_CHECK(nodes_[node].in_use && nodes_[node].slot != kNoSlot);
  const uint32_t parent = nodes_[node].parent;
  DetachAndFree(node, affected);
  Node& p = nodes_[parent];
  if (p.slot == kNoSlot) {
    if (p.children.empty()) {
      roots_.erase(p.ns);
      FreeNode(parent);
    }
    return;
  }
  TryMerge(parent);
}

void RadixTree::Truncate(uint32_t node, uint64_t keep, std::vector<uint32_t>* affected) {
  RANGEKV_CHECK(keep > 0 && keep < nodes_[node].label_len);
  std::vector<uint32_t> kids = nodes_[node].children;
  for (uint32_t c : kids) DetachAndFree(c, affected);
  Node& n = nodes_[node];
  const uint64_t drop = n.label_len - keep;
  live_tokens_ -= drop;
  packs_[n.slot].covered_tokens -= drop;
  n.label_len = static_cast<uint32_t>(keep);
  affected->push_back(n.slot);
}

bool RadixTree::TryMerge(uint32_t node) {
  Node& p = nodes_[node];
  if (p.slot == kNoSlot || p.children.size() != 1) return false;
  const uint32_t ci = p.children[0];
  if (nodes_[ci].slot != p.slot) return false;
  const uint64_t total = uint64_t{p.label_len} + nodes_[ci].label_len;
  if (p.label_offset + p.label_len != nodes_[ci].label_offset) {
    // Labels are not adjacent in the arena (one was compacted or allocated separately): copy.
    std::vector<int32_t> joined(total);
    std::memcpy(joined.data(), arena_.data() + p.label_offset, p.label_len * sizeof(int32_t));
    std::memcpy(joined.data() + p.label_len, arena_.data() + nodes_[ci].label_offset,
                nodes_[ci].label_len * sizeof(int32_t));
    const uint64_t offset = AllocLabel(joined.data(), total);  // may compact
    live_tokens_ -= total;  // the old labels become garbage; the new one replaces them
    nodes_[node].label_offset = offset;
  }
  Node& up = nodes_[node];
  Node& lo = nodes_[ci];
  up.label_len = static_cast<uint32_t>(total);
  up.children = std::move(lo.children);
  lo.children.clear();
  for (uint32_t c : up.children) nodes_[c].parent = node;
  packs_[up.slot].node_count--;
  FreeNode(ci);
  return true;
}

void RadixTree::MergeAll() {
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i].in_use) continue;
    while (TryMerge(i)) {
    }
  }
}

void RadixTree::PathTo(uint32_t node, std::vector<uint32_t>* out) const {
  out->clear();
  for (uint32_t n = node; nodes_[n].slot != kNoSlot; n = nodes_[n].parent) out->push_back(n);
  std::reverse(out->begin(), out->end());
}

Status RadixTree::CheckInvariants() const {
  auto fail = [](const std::string& what) { return Internal("radix tree invariant: " + what); };
  std::vector<Pack> packs(packs_.size());
  std::vector<uint32_t> same_pack_children(nodes_.size(), 0);
  uint32_t nodes = 0, records = 0;
  uint64_t live = 0;
  for (const auto& [ns, root] : roots_) {
    const Node& r = nodes_[root];
    if (!r.in_use || r.slot != kNoSlot || r.label_len != 0 || !(r.ns == ns)) {
      return fail("bad root");
    }
    if (r.children.empty()) return fail("empty namespace root kept");
    std::vector<uint32_t> stack{root};
    while (!stack.empty()) {
      const uint32_t y = stack.back();
      stack.pop_back();
      const Node& n = nodes_[y];
      nodes++;
      for (size_t i = 0; i < n.children.size(); ++i) {
        const uint32_t c = n.children[i];
        const Node& cn = nodes_[c];
        if (!cn.in_use || cn.parent != y) return fail("child/parent link");
        if (cn.label_len == 0) return fail("empty label");
        if (cn.depth_begin != n.depth_end()) return fail("depth");
        if (!(cn.ns == n.ns)) return fail("namespace");
        if (i > 0 && arena_[nodes_[n.children[i - 1]].label_offset] >= arena_[cn.label_offset]) {
          return fail("children not sorted by distinct first tokens");
        }
        if (cn.pack_offset + cn.label_len > tokens_per_pack_) return fail("pack overflow");
        if (n.slot == cn.slot) {
          if (cn.pack_offset != n.pack_offset + n.label_len) return fail("pack continuity");
          same_pack_children[y]++;
        } else {
          if (cn.pack_offset != 0) return fail("pack does not start at offset 0");
          if (packs[cn.slot].first_node != kNoNode) return fail("pack entered twice");
          packs[cn.slot].first_node = c;
          packs[cn.slot].path_begin = cn.depth_begin;
          if (n.slot != kNoSlot) packs[n.slot].foreign_children++;
        }
        packs[cn.slot].node_count++;
        packs[cn.slot].covered_tokens += cn.label_len;
        records++;
        live += cn.label_len;
        stack.push_back(c);
      }
      if (same_pack_children[y] > 1) return fail("pack branches");
      if (n.slot != kNoSlot && n.children.size() == 1 && same_pack_children[y] == 1) {
        return fail("unmerged single same-pack child");
      }
    }
  }
  if (nodes != nodes_in_use_ || records != records_ || live != live_tokens_) {
    return fail("counts: nodes " + std::to_string(nodes) + "/" + std::to_string(nodes_in_use_) +
                " records " + std::to_string(records) + "/" + std::to_string(records_) +
                " tokens " + std::to_string(live) + "/" + std::to_string(live_tokens_));
  }
  for (size_t s = 0; s < packs_.size(); ++s) {
    const Pack& a = packs[s];
    const Pack& b = packs_[s];
    if (a.first_node != b.first_node || a.node_count != b.node_count ||
        a.covered_tokens != b.covered_tokens || a.foreign_children != b.foreign_children ||
        (a.node_count > 0 && a.path_begin != b.path_begin)) {
      return fail("pack " + std::to_string(s) + " bookkeeping");
    }
  }
  return OkStatus();
}

}  // namespace rangekv::directory_internal
