// axes.h: one int64 per axis (a shape, byte strides, mins), up to four in place.
//
// A view holds three of these. Most buffers have at most four axes, so making a view (b[1:3],
// a crop, a Buffer) allocates nothing for its geometry; a buffer of more axes keeps them on the
// heap. The interface is std::vector's, as far as the geometry code uses it, and an Axes converts
// to and from std::vector<int64_t> for code that keeps one.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <utility>
#include <vector>

namespace hb {

class Axes {
public:
    using value_type = int64_t;
    using iterator = int64_t *;
    using const_iterator = const int64_t *;

    Axes() = default;
    explicit Axes(size_t n, int64_t value = 0) { assign(n, value); }
    Axes(std::initializer_list<int64_t> values) : Axes(values.begin(), values.end()) {}
    template <typename It, typename = decltype(*std::declval<It>())>
    Axes(It first, It last) {
        reserve(size_t(std::distance(first, last)));
        for (; first != last; ++first) push_back(int64_t(*first));
    }
    Axes(const std::vector<int64_t> &values) : Axes(values.begin(), values.end()) {}  // NOLINT: implicit
    Axes(const Axes &other) : Axes(other.begin(), other.end()) {}
    Axes(Axes &&other) noexcept { take(other); }
    Axes &operator=(const Axes &other) {
        if (this != &other) {
            clear();
            reserve(other.size_);
            std::copy(other.begin(), other.end(), data_);
            size_ = other.size_;
        }
        return *this;
    }
    Axes &operator=(Axes &&other) noexcept {
        if (this != &other) {
            release();
            take(other);
        }
        return *this;
    }
    ~Axes() { release(); }

    operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT: implicit

    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    int64_t *data() { return data_; }
    const int64_t *data() const { return data_; }
    int64_t &operator[](size_t i) { return data_[i]; }
    const int64_t &operator[](size_t i) const { return data_[i]; }
    iterator begin() { return data_; }
    iterator end() { return data_ + size_; }
    const_iterator begin() const { return data_; }
    const_iterator end() const { return data_ + size_; }

    void clear() { size_ = 0; }
    void reserve(size_t n) {
        if (n <= capacity_) return;
        auto *grown = new int64_t[n];
        std::copy(begin(), end(), grown);
        release();
        data_ = grown;
        capacity_ = uint32_t(n);
    }
    void resize(size_t n, int64_t value = 0) {
        reserve(n);
        for (size_t i = size_; i < n; ++i) data_[i] = value;
        size_ = uint32_t(n);
    }
    void assign(size_t n, int64_t value) {
        clear();
        resize(n, value);
    }
    void push_back(int64_t value) {
        if (size_ == capacity_) reserve(2 * capacity_);
        data_[size_++] = value;
    }
    iterator insert(const_iterator at, int64_t value) {
        size_t i = size_t(at - data_);
        push_back(value);
        std::rotate(data_ + i, data_ + size_ - 1, data_ + size_);
        return data_ + i;
    }
    iterator erase(const_iterator at) {
        size_t i = size_t(at - data_);
        std::copy(data_ + i + 1, data_ + size_, data_ + i);
        --size_;
        return data_ + i;
    }

    friend bool operator==(const Axes &a, const Axes &b) {
        return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
    }
    friend bool operator!=(const Axes &a, const Axes &b) { return !(a == b); }

private:
    static constexpr uint32_t kInPlace = 4;

    bool on_heap() const { return data_ != in_place_; }
    void release() {
        if (on_heap()) delete[] data_;
        data_ = in_place_;
        capacity_ = kInPlace;
    }
    /// Takes other's values (its heap block, or a copy of its values in place); other is left empty.
    void take(Axes &other) {
        if (other.on_heap()) {
            data_ = other.data_;
            capacity_ = other.capacity_;
        } else {
            std::copy(other.begin(), other.end(), in_place_);
        }
        size_ = other.size_;
        other.data_ = other.in_place_;
        other.capacity_ = kInPlace;
        other.size_ = 0;
    }

    int64_t in_place_[kInPlace];
    int64_t *data_ = in_place_;
    uint32_t size_ = 0;
    uint32_t capacity_ = kInPlace;
};

}  // namespace hb
