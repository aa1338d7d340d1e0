module tokend.io/tokend

go 1.19

require golang.org/x/oauth2 v0.3.0

require golang.org/x/net v0.7.0 // indirect

// Built offline from Debian's sources (apt-get install golang-golang-x-oauth2-dev, which
// brings golang-golang-x-net-dev): no module proxy is needed, and a module replaced by a
// directory needs no go.sum entry. A program that imports this module sets its own
// requirements; these replace lines apply only when building this module itself.
replace golang.org/x/oauth2 => /usr/share/gocode/src/golang.org/x/oauth2

replace golang.org/x/net => /usr/share/gocode/src/golang.org/x/net
