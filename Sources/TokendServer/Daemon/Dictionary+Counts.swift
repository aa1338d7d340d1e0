extension Dictionary where Value == Int {
    /// Takes one from `key`'s count, removing the key at zero, so that a map of counts per uid
    /// holds only the uids that have something.
    mutating func decrementCount(_ key: Key) {
        let left = self[key, default: 1] - 1
        self[key] = left > 0 ? left : nil
    }
}
