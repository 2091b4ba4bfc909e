#ifndef MULTIPEER_COPENSSL_SHIM_AEAD_H
#define MULTIPEER_COPENSSL_SHIM_AEAD_H
// Static inline wrappers for OpenSSL EVP AEAD macros used by Sources/Multipeer/Datagram.
#endif
