// Detail anchoring: group details by (session, turn) in one hash pass, then read each entry's group.
#include "native.hpp"

namespace promem {

namespace {

// Open-addressing map from a (session, turn) key to a dense group id, linear probing.
class KeyGroups {
public:
    explicit KeyGroups(std::size_t expected)
        : mask_(detail::table_capacity(expected) - 1), slots_(mask_ + 1) {}

    // Group id of the key, creating a new one (== current size) when unseen.
    std::int64_t get_or_add(std::int64_t session, std::int64_t turn) {
        const std::uint64_t h = hash(session, turn);
        std::size_t pos = static_cast<std::size_t>(h) & mask_;
        while (true) {
            Slot& s = slots_[pos];
            if (s.group < 0) {
                s.hash = h;
                s.session = session;
                s.turn = turn;
                s.group = n_groups_++;
                return s.group;
            }
            if (s.hash == h && s.session == session && s.turn == turn) return s.group;
            pos = (pos + 1) & mask_;
        }
    }

    // Group id of the key, or -1 when no detail has it.
    std::int64_t find(std::int64_t session, std::int64_t turn) const {
        const std::uint64_t h = hash(session, turn);
        std::size_t pos = static_cast<std::size_t>(h) & mask_;
        while (true) {
            const Slot& s = slots_[pos];
            if (s.group < 0) return -1;
            if (s.hash == h && s.session == session && s.turn == turn) return s.group;
            pos = (pos + 1) & mask_;
        }
    }

    std::int64_t size() const { return n_groups_; }

private:
    struct Slot {
        std::uint64_t hash = 0;
        std::int64_t session = 0;
        std::int64_t turn = 0;
        std::int64_t group = -1;
    };

    static std::uint64_t hash(std::int64_t session, std::int64_t turn) {
        return detail::hash_combine(detail::mix64(static_cast<std::uint64_t>(session)), turn);
    }

    std::size_t mask_;
    std::vector<Slot> slots_;
    std::int64_t n_groups_ = 0;
};

}  // namespace

AnchorResult anchor_details(const std::int64_t* detail_session, const std::int64_t* detail_turn, std::size_t n,
                            const std::int64_t* entry_session, const std::int64_t* entry_turn, std::size_t m) {
    AnchorResult out;
    out.offsets.assign(m + 1, 0);
    if (n == 0 || m == 0) return out;

    // Pass 1: group id per grounded detail (-1 for ungrounded ones) and the size of each group.
    KeyGroups groups(n);
    std::vector<std::int64_t> detail_group(n, -1);
    std::vector<std::int64_t> group_start;  // becomes CSR offsets over groups
    group_start.reserve(n + 1);
    group_start.push_back(0);
    for (std::size_t i = 0; i < n; ++i) {
        if (detail_turn[i] < 0) continue;
        const std::int64_t g = groups.get_or_add(detail_session[i], detail_turn[i]);
        if (g == static_cast<std::int64_t>(group_start.size()) - 1) group_start.push_back(0);
        detail_group[i] = g;
        ++group_start[static_cast<std::size_t>(g) + 1];
    }
    const std::size_t n_groups = static_cast<std::size_t>(groups.size());
    for (std::size_t g = 0; g < n_groups; ++g) group_start[g + 1] += group_start[g];

    // Pass 2: members of each group, in ascending detail order because i ascends.
    std::vector<std::int64_t> members(static_cast<std::size_t>(group_start[n_groups]));
    {
        std::vector<std::int64_t> cursor(group_start.begin(), group_start.end() - 1);
        for (std::size_t i = 0; i < n; ++i) {
            const std::int64_t g = detail_group[i];
            if (g >= 0) members[static_cast<std::size_t>(cursor[static_cast<std::size_t>(g)]++)] =
                static_cast<std::int64_t>(i);
        }
    }
    std::vector<std::int64_t>().swap(detail_group);

    // Pass 3: each entry's group and the output offsets.
    std::vector<std::int64_t> entry_group(m, -1);
    for (std::size_t j = 0; j < m; ++j) {
        std::int64_t count = 0;
        if (entry_turn[j] >= 0) {
            const std::int64_t g = groups.find(entry_session[j], entry_turn[j]);
            entry_group[j] = g;
            if (g >= 0) count = group_start[static_cast<std::size_t>(g) + 1] - group_start[static_cast<std::size_t>(g)];
        }
        out.offsets[j + 1] = out.offsets[j] + count;
    }

    // Pass 4: copy each entry's group into the flat index array.
    out.indices.resize(static_cast<std::size_t>(out.offsets[m]));
    for (std::size_t j = 0; j < m; ++j) {
        const std::int64_t g = entry_group[j];
        if (g < 0) continue;
        const std::int64_t* first = members.data() + group_start[static_cast<std::size_t>(g)];
        const std::int64_t* last = members.data() + group_start[static_cast<std::size_t>(g) + 1];
        std::int64_t* dst = out.indices.data() + out.offsets[j];
        for (const std::int64_t* p = first; p != last; ++p) *dst++ = *p;
    }
    return out;
}

}  // namespace promem
