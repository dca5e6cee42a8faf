// Edge cleaning: hash the canonical (session, source, relation, target) of every candidate edge, split
// the candidates into cache-sized partitions by the top bits of the hash, and deduplicate each partition
// with a small open-addressing table that stays in cache. Duplicates share a hash, hence a partition;
// partitions keep input order, so the first occurrence of an edge is always the one kept.
#include "native.hpp"

#include <algorithm>
#include <utility>

namespace promem {

RelationCheck check_relations(const std::int64_t* relation, std::size_t e, std::int64_t n_relations) {
    RelationCheck res;
    for (std::size_t k = 0; k < e; ++k) {
        const std::int64_t r = relation[k];
        if (r < 0 || (n_relations >= 0 && r >= n_relations)) {
            res.ok = false;
            res.edge = k;
            res.relation = r;
            return res;
        }
    }
    return res;
}

namespace {

struct EdgeKey {
    std::int64_t session;
    std::int64_t source;
    std::int64_t relation;
    std::int64_t target;

    bool operator==(const EdgeKey& o) const {
        return session == o.session && source == o.source && relation == o.relation && target == o.target;
    }
};

struct HashedEdge {
    std::uint64_t hash;
    std::int64_t index;
};

// About this many candidates per partition: its records and table together fit in L2.
constexpr std::size_t kPartitionTarget = 2048;

class EdgeView {
public:
    EdgeView(const std::int64_t* session, const std::int64_t* source, const std::int64_t* relation,
             const std::int64_t* target, const std::uint8_t* symmetric)
        : session_(session), source_(source), relation_(relation), target_(target), symmetric_(symmetric) {}

    bool droppable(std::size_t k) const {
        const std::int64_t a = source_[k];
        const std::int64_t b = target_[k];
        return a < 0 || b < 0 || a == b;
    }

    // The key that identifies edge k: endpoints ordered for a symmetric relation.
    EdgeKey canonical(std::size_t k) const {
        std::int64_t a = source_[k];
        std::int64_t b = target_[k];
        const std::int64_t r = relation_[k];
        if (symmetric_ != nullptr && symmetric_[r] != 0 && b < a) std::swap(a, b);
        return EdgeKey{session_[k], a, r, b};
    }

    static std::uint64_t hash(const EdgeKey& key) {
        std::uint64_t h = detail::mix64(static_cast<std::uint64_t>(key.session));
        h = detail::hash_combine(h, key.source);
        h = detail::hash_combine(h, key.relation);
        return detail::hash_combine(h, key.target);
    }

private:
    const std::int64_t* session_;
    const std::int64_t* source_;
    const std::int64_t* relation_;
    const std::int64_t* target_;
    const std::uint8_t* symmetric_;
};

}  // namespace

std::vector<std::int64_t> clean_edges(const std::int64_t* session, const std::int64_t* source,
                                      const std::int64_t* relation, const std::int64_t* target, std::size_t e,
                                      const std::uint8_t* symmetric) {
    const EdgeView edges(session, source, relation, target, symmetric);

    // Hash every candidate (an edge that survives the self-loop / endpoint filter), in input order.
    std::vector<HashedEdge> hashed;
    hashed.reserve(e);
    for (std::size_t k = 0; k < e; ++k) {
        if (edges.droppable(k)) continue;
        hashed.push_back(HashedEdge{EdgeView::hash(edges.canonical(k)), static_cast<std::int64_t>(k)});
    }
    const std::size_t n_cand = hashed.size();
    if (n_cand == 0) return {};

    // Stable scatter into 2^bits partitions by the top hash bits (skipped when one partition suffices).
    unsigned bits = 0;
    while (bits < 24 && (n_cand >> bits) > kPartitionTarget) ++bits;
    const std::size_t n_parts = std::size_t{1} << bits;
    std::vector<std::size_t> part_start(n_parts + 1, 0);
    std::vector<HashedEdge> parted;
    if (bits == 0) {
        part_start[1] = n_cand;
        parted.swap(hashed);
    } else {
        const unsigned shift = 64 - bits;
        for (const HashedEdge& h : hashed) ++part_start[static_cast<std::size_t>(h.hash >> shift) + 1];
        for (std::size_t p = 0; p < n_parts; ++p) part_start[p + 1] += part_start[p];
        parted.resize(n_cand);
        std::vector<std::size_t> cursor(part_start.begin(), part_start.end() - 1);
        for (const HashedEdge& h : hashed) parted[cursor[static_cast<std::size_t>(h.hash >> shift)]++] = h;
        std::vector<HashedEdge>().swap(hashed);
    }

    std::size_t largest = 0;
    for (std::size_t p = 0; p < n_parts; ++p) largest = std::max(largest, part_start[p + 1] - part_start[p]);

    // Per partition: slots hold (position within the partition + 1), 0 meaning empty.
    std::vector<std::uint64_t> table(detail::table_capacity(largest));
    std::vector<std::uint8_t> keep(e, 0);
    std::size_t n_kept = 0;
    for (std::size_t p = 0; p < n_parts; ++p) {
        const HashedEdge* part = parted.data() + part_start[p];
        const std::size_t size = part_start[p + 1] - part_start[p];
        if (size == 0) continue;
        const std::size_t cap = detail::table_capacity(size);
        const std::size_t mask = cap - 1;
        std::fill(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(cap), 0);
        for (std::size_t q = 0; q < size; ++q) {
            const HashedEdge& cur = part[q];
            std::size_t pos = static_cast<std::size_t>(cur.hash) & mask;
            while (true) {
                const std::uint64_t slot = table[pos];
                if (slot == 0) {
                    table[pos] = q + 1;
                    keep[static_cast<std::size_t>(cur.index)] = 1;
                    ++n_kept;
                    break;
                }
                const HashedEdge& other = part[slot - 1];
                if (other.hash == cur.hash &&
                    edges.canonical(static_cast<std::size_t>(other.index)) ==
                        edges.canonical(static_cast<std::size_t>(cur.index))) {
                    break;  // a later copy of an edge already kept
                }
                pos = (pos + 1) & mask;
            }
        }
    }
    std::vector<HashedEdge>().swap(parted);

    std::vector<std::int64_t> kept;
    kept.reserve(n_kept);
    for (std::size_t k = 0; k < e; ++k) {
        if (keep[k]) kept.push_back(static_cast<std::int64_t>(k));
    }
    return kept;
}

}  // namespace promem
