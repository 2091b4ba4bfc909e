#ifndef MULTIPEER_COPENSSL_SHIM_TLS_H
#define MULTIPEER_COPENSSL_SHIM_TLS_H
// Static inline wrappers for OpenSSL TLS macros used by Sources/Multipeer/Secure.
#endif
