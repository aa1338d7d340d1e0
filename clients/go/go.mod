module tokend.io/tokend

go 1.19

require golang.org/x/oauth2 v0.3.0

require golang.org/x/net v0.7.0 // indirect
