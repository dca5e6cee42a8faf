// Detail anchoring: group details by (session, turn) in one hash pass, then read each entry's group.
//
// Details normally arrive in extraction order (grouped by session, then turn), so every group is one
// contiguous run of detail indices; that case needs no second pass. Any other order is handled by a
// counting-sort placement of the members of each group.
#include "native.hpp"

namespace promem {

namespace {

// Open-addressing map from a (session, turn) key to a dense group id; linear probing, grows by doubling
// so its size follows the number of distinct keys, not the number of details.
class KeyGroups {
public:
    KeyGroups() : mask_(detail::table_capacity(0) - 1), slots_(mask_ + 1) {}

    // Group id of the key; a new id (== size() before the call) when the key is unseen.
    std::int64_t get_or_add(std::int64_t session, std::int64_t turn) {
        const std::uint64_t h = hash(session, turn);
        std::size_t pos = static_cast<std::size_t>(h) & mask_;
        while (true) {
            Slot& s = slots_[pos];
            if (s.group < 0) break;
            if (s.hash == h && s.session == session && s.turn == turn) return s.group;
            pos = (pos + 1) & mask_;
        }
        if (static_cast<std::size_t>(n_groups_ + 1) * 2 > slots_.size()) {
            grow();
            pos = static_cast<std::size_t>(h) & mask_;
            while (slots_[pos].group >= 0) pos = (pos + 1) & mask_;
        }
        Slot& s = slots_[pos];
        s.hash = h;
        s.session = session;
        s.turn = turn;
        s.group = n_groups_++;
        return s.group;
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

    void grow() {
        std::vector<Slot> old(slots_.size() * 2);
        old.swap(slots_);
        mask_ = slots_.size() - 1;
        for (const Slot& s : old) {
            if (s.group < 0) continue;
            std::size_t pos = static_cast<std::size_t>(s.hash) & mask_;
            while (slots_[pos].group >= 0) pos = (pos + 1) & mask_;
            slots_[pos] = s;
        }
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

    // Pass 1: find the groups, their first member and size. A group stays one contiguous run only if
    // each of its members directly follows the previous one; any revisit of a known key breaks that.
    KeyGroups groups;
    std::vector<std::int64_t> group_first;
    std::vector<std::int64_t> group_count;
    bool contiguous = true;
    bool have_prev = false;  // detail i-1 was grounded and belongs to group prev_group
    std::int64_t prev_session = 0, prev_turn = 0, prev_group = -1;
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t s = detail_session[i];
        const std::int64_t t = detail_turn[i];
        if (t < 0) {
            have_prev = false;
            continue;
        }
        std::int64_t g;
        if (have_prev && s == prev_session && t == prev_turn) {
            g = prev_group;
        } else {
            g = groups.get_or_add(s, t);
            if (static_cast<std::size_t>(g) == group_first.size()) {
                group_first.push_back(static_cast<std::int64_t>(i));
                group_count.push_back(0);
            } else {
                contiguous = false;
            }
        }
        ++group_count[static_cast<std::size_t>(g)];
        have_prev = true;
        prev_session = s;
        prev_turn = t;
        prev_group = g;
    }
    const std::size_t n_groups = static_cast<std::size_t>(groups.size());

    // Where each group's members sit: in the detail index space itself when contiguous, otherwise in
    // a members array laid out group after group (each in ascending detail order).
    std::vector<std::int64_t> group_start(group_first);
    std::vector<std::int64_t> members;
    if (!contiguous) {
        std::int64_t acc = 0;
        for (std::size_t g = 0; g < n_groups; ++g) {
            group_start[g] = acc;
            acc += group_count[g];
        }
        members.resize(static_cast<std::size_t>(acc));
        std::vector<std::int64_t> cursor(group_start);
        have_prev = false;
        for (std::size_t i = 0; i < n; ++i) {
            const std::int64_t s = detail_session[i];
            const std::int64_t t = detail_turn[i];
            if (t < 0) {
                have_prev = false;
                continue;
            }
            const std::int64_t g =
                (have_prev && s == prev_session && t == prev_turn) ? prev_group : groups.find(s, t);
            members[static_cast<std::size_t>(cursor[static_cast<std::size_t>(g)]++)] = static_cast<std::int64_t>(i);
            have_prev = true;
            prev_session = s;
            prev_turn = t;
            prev_group = g;
        }
    }

    // Pass 2: each entry's group and the output offsets.
    std::vector<std::int64_t> entry_group(m, -1);
    for (std::size_t j = 0; j < m; ++j) {
        std::int64_t count = 0;
        if (entry_turn[j] >= 0) {
            const std::int64_t g = groups.find(entry_session[j], entry_turn[j]);
            entry_group[j] = g;
            if (g >= 0) count = group_count[static_cast<std::size_t>(g)];
        }
        out.offsets[j + 1] = out.offsets[j] + count;
    }

    // Pass 3: write each entry's details into the flat index array.
    out.indices.resize(static_cast<std::size_t>(out.offsets[m]));
    for (std::size_t j = 0; j < m; ++j) {
        const std::int64_t g = entry_group[j];
        if (g < 0) continue;
        const std::int64_t start = group_start[static_cast<std::size_t>(g)];
        const std::int64_t count = group_count[static_cast<std::size_t>(g)];
        std::int64_t* dst = out.indices.data() + out.offsets[j];
        if (contiguous) {
            for (std::int64_t q = 0; q < count; ++q) dst[q] = start + q;
        } else {
            const std::int64_t* src = members.data() + start;
            for (std::int64_t q = 0; q < count; ++q) dst[q] = src[q];
        }
    }
    return out;
}

}  // namespace promem
