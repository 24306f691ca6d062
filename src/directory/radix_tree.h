// RadixTree: the Directory's compressed prefix tree over int32 token ids (internal header).
//
// One root per namespace. Every other node carries an edge label (a run of token ids stored in
// a token arena) and exactly one pack piece: the label's tokens live in pack slot `slot` from
// token offset `pack_offset` on. Node boundaries fall at branch points and at pack boundaries,
// so a lookup that walks k nodes selects at most k pieces, whatever the reuse granularity.
//
// Invariants (checked by CheckInvariants() in tests):
// - children of a node have distinct first tokens and are kept sorted by them;
// - a node's depth_begin is its parent's depth_begin + parent's label_len (roots: 0, empty);
// - the nodes of one pack form a single chain: the pack's first node (pack_offset 0, its parent
//   holds another pack or is the root) and then same-pack children with contiguous offsets,
//   each node having at most one same-pack child; pack_offset + label_len <= tokens_per_pack;
// - a node with exactly one child of its own pack is merged with it (the tree stays
//   compressed) unless the merge is pending in the current operation;
// - per pack: node_count, covered_tokens (sum of its labels), foreign_children (edges from its
//   nodes to nodes of other packs) and path_begin are exact.
// The tree never looks at slot states; callers pass a predicate deciding which nodes a walk
// may enter.
//
// Capacity: max_nodes (roots included), max_records (non-root nodes), max_label_tokens (live
// arena tokens) and max_namespaces are hard bounds; CheckCapacity() says whether an operation
// fits, the mutators REQUIRE that it did. The arena compacts itself when its garbage exceeds its
// live tokens, so its physical size stays below ~2x the live tokens.
//
// Thread-safety: none (guarded by the Directory's mutex).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <vector>

#include "rangekv/geometry.h"
#include "rangekv/status.h"

namespace rangekv::directory_internal {

inline constexpr uint32_t kNoNode = UINT32_MAX;
inline constexpr uint32_t kNoSlot = UINT32_MAX;

// Number of leading equal tokens of a and b (both at least n long). Compares 64-token blocks
// with memcmp and only scans the one block that differs.
uint64_t CommonPrefix(const int32_t* a, const int32_t* b, uint64_t n);

class RadixTree {
 public:
  struct Limits {
    uint32_t max_nodes = 0;
    uint32_t max_records = 0;
    uint64_t max_label_tokens = 0;
    uint32_t max_namespaces = 0;
  };

  struct Node {
    uint32_t parent = kNoNode;
    uint32_t slot = kNoSlot;  // kNoSlot: a namespace root
    uint32_t label_len = 0;
    bool in_use = false;
    uint64_t label_offset = 0;  // index into the arena
    uint64_t depth_begin = 0;   // path position of the label's first token
    uint64_t pack_offset = 0;   // pack token offset of the label's first token
    NamespaceId ns;
    std::vector<uint32_t> children;  // sorted by first label token

    uint64_t depth_end() const { return depth_begin + label_len; }
  };

  struct Pack {
    uint32_t first_node = kNoNode;  // kNoNode: the pack holds no node
    uint32_t node_count = 0;
    uint32_t foreign_children = 0;
    uint64_t covered_tokens = 0;
    uint64_t path_begin = 0;  // path position of the pack's token 0 (kept after removal)
    NamespaceId ns;
  };

  // One node entered by a walk and how many of its label tokens matched (>= 1).
  struct Step {
    uint32_t node;
    uint64_t matched;
  };

  RadixTree(const Limits& limits, uint32_t pack_slots, uint64_t tokens_per_pack);

  // Root of `ns`, or kNoNode.
  uint32_t FindRoot(const NamespaceId& ns) const;
  // REQUIRES CheckCapacity(1, 0, 0, true) when the root does not exist yet.
  uint32_t EnsureRoot(const NamespaceId& ns);

  // kResourceExhausted naming the first bound the addition would exceed.
  Status CheckCapacity(uint64_t new_nodes, uint64_t new_records, uint64_t new_tokens,
                       bool new_namespace) const;

  // Walks from `root` along `tokens`, entering a child only when enter(node) is true. Appends
  // one Step per entered node to *steps (cleared first) and adds the number of token pairs
  // compared to *compared. Returns the number of tokens matched.
  template <typename Enter>
  uint64_t Walk(uint32_t root, std::span<const int32_t> tokens, Enter enter,
                std::vector<Step>* steps, uint64_t* compared) const {
    steps->clear();
    uint64_t pos = 0;
    uint32_t cur = root;
    while (pos < tokens.size()) {
      uint32_t child = FindChild(cur, tokens[pos]);
      if (child == kNoNode || !enter(child)) break;
      const Node& c = nodes_[child];
      uint64_t n = std::min<uint64_t>(c.label_len, tokens.size() - pos);
      uint64_t k = CommonPrefix(arena_.data() + c.label_offset, tokens.data() + pos, n);
      *compared += (k < n) ? k + 1 : k;
      steps->push_back({child, k});
      pos += k;
      if (k < c.label_len) break;
      cur = child;
    }
    return pos;
  }

  // Splits `node` after its first `k` tokens (0 < k < label_len): the node keeps the upper
  // part, a new node (returned) takes the rest and the children. REQUIRES capacity for one node
  // and one record.
  uint32_t Split(uint32_t node, uint64_t k);
  // Appends a child of `parent` labelled `label` in pack `slot` at `pack_offset`. REQUIRES
  // capacity, no child of parent starting with label[0], and pack continuity (see invariants).
  uint32_t Attach(uint32_t parent, std::span<const int32_t> label, uint32_t slot,
                  uint64_t pack_offset);
  // Removes `node` and everything below it; merges the parent with a lone same-pack child and
  // drops a namespace root left without children. Appends every pack that lost a node to
  // *affected (possibly repeated).
  void RemoveSubtree(uint32_t node, std::vector<uint32_t>* affected);
  // Keeps the first `keep` tokens of `node` (0 < keep < label_len) and removes the rest of its
  // label and all its children. Appends affected packs to *affected.
  void Truncate(uint32_t node, uint64_t keep, std::vector<uint32_t>* affected);
  // Merges every node with a lone same-pack child (restores compression after a rebuild).
  void MergeAll();

  const Node& node(uint32_t i) const { return nodes_[i]; }
  const Pack& pack(uint32_t slot) const { return packs_[slot]; }
  std::span<const int32_t> Label(uint32_t node) const {
    const Node& n = nodes_[node];
    return {arena_.data() + n.label_offset, n.label_len};
  }
  // Child of `node` whose label starts with `token`, or kNoNode.
  uint32_t FindChild(uint32_t node, int32_t token) const;
  // Non-root nodes from the root down to `node`, in path order.
  void PathTo(uint32_t node, std::vector<uint32_t>* out) const;
  // Namespace roots in NamespaceId order.
  const std::map<NamespaceId, uint32_t>& roots() const { return roots_; }

  uint32_t nodes_in_use() const { return nodes_in_use_; }
  uint32_t records() const { return records_; }
  uint64_t live_tokens() const { return live_tokens_; }
  uint64_t arena_tokens() const { return arena_.size(); }
  uint64_t tokens_per_pack() const { return tokens_per_pack_; }

  // Recomputes every invariant from scratch; kInternal describing the first violation.
  Status CheckInvariants() const;

 private:
  uint32_t NewNode();
  void FreeNode(uint32_t i);
  // Appends `len` tokens copied from `src` (which may point into the arena) and returns their
  // offset; compacts first when garbage exceeds the live tokens.
  uint64_t AllocLabel(const int32_t* src_outside_arena, uint64_t len);
  void Compact(uint64_t extra_tokens);
  void InsertChild(uint32_t parent, uint32_t child);
  void EraseChild(uint32_t parent, uint32_t child);
  // Frees `node`'s subtree after it was detached; appends affected packs.
  void FreeDetached(uint32_t node, std::vector<uint32_t>* affected);
  void DetachAndFree(uint32_t node, std::vector<uint32_t>* affected);
  bool TryMerge(uint32_t node);

  Limits limits_;
  uint64_t tokens_per_pack_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_nodes_;
  std::vector<Pack> packs_;
  std::vector<int32_t> arena_;
  uint64_t live_tokens_ = 0;
  uint32_t nodes_in_use_ = 0;
  uint32_t records_ = 0;
  std::map<NamespaceId, uint32_t> roots_;
  std::vector<uint32_t> stack_;  // scratch for subtree walks
};

}  // namespace rangekv::directory_internal
