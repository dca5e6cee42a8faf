// Edge cleaning: one pass over the edges with a hash set of canonical (session, source, relation, target).
#include "native.hpp"

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

// Open-addressing set of edge keys, linear probing; stores the hash to skip most key compares.
class EdgeSet {
public:
    explicit EdgeSet(std::size_t expected) : mask_(detail::table_capacity(expected) - 1), slots_(mask_ + 1) {}

    // True when the key was not in the set (and is now).
    bool insert(const EdgeKey& key) {
        std::uint64_t h = detail::mix64(static_cast<std::uint64_t>(key.session));
        h = detail::hash_combine(h, key.source);
        h = detail::hash_combine(h, key.relation);
        h = detail::hash_combine(h, key.target);
        std::size_t pos = static_cast<std::size_t>(h) & mask_;
        while (true) {
            Slot& s = slots_[pos];
            if (!s.used) {
                s.used = true;
                s.hash = h;
                s.key = key;
                return true;
            }
            if (s.hash == h && s.key == key) return false;
            pos = (pos + 1) & mask_;
        }
    }

private:
    struct Slot {
        EdgeKey key{0, 0, 0, 0};
        std::uint64_t hash = 0;
        bool used = false;
    };

    std::size_t mask_;
    std::vector<Slot> slots_;
};

inline bool droppable(std::int64_t a, std::int64_t b) { return a < 0 || b < 0 || a == b; }

}  // namespace

std::vector<std::int64_t> clean_edges(const std::int64_t* session, const std::int64_t* source,
                                      const std::int64_t* relation, const std::int64_t* target, std::size_t e,
                                      const std::uint8_t* symmetric) {
    std::vector<std::int64_t> kept;
    std::size_t candidates = 0;
    for (std::size_t k = 0; k < e; ++k) candidates += droppable(source[k], target[k]) ? 0 : 1;
    if (candidates == 0) return kept;

    kept.reserve(candidates);
    EdgeSet seen(candidates);
    for (std::size_t k = 0; k < e; ++k) {
        std::int64_t a = source[k];
        std::int64_t b = target[k];
        if (droppable(a, b)) continue;
        const std::int64_t r = relation[k];
        if (symmetric != nullptr && symmetric[r] != 0 && b < a) std::swap(a, b);
        if (seen.insert(EdgeKey{session[k], a, r, b})) kept.push_back(static_cast<std::int64_t>(k));
    }
    return kept;
}

}  // namespace promem
