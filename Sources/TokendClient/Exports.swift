// The client's public API is made of the protocol module's types (`Credentials`,
// `CredentialStatus`, `AddCredentialRequest`, `VarlinkCall`, …), so a program that imports
// `TokendClient` gets them without a second import.
@_exported import TokendProtocol
