// Readers travel in `AddCredential`'s and `BeginLogin`'s `readers` and come back in
// `Status`; their grammar (`uid:N`, `gid:N`, `user:NAME`, `group:NAME`) is part of the protocol.
// It is defined once, in TokendReaders (which TokendCore's credential model and the stores use
// too), and re-exported here so that clients and tokenctl parse with the same ``Reader``.
@_exported import TokendReaders
