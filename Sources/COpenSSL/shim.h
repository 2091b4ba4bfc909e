#ifndef MULTIPEER_COPENSSL_SHIM_H
#define MULTIPEER_COPENSSL_SHIM_H

// The OpenSSL 3 headers swift-multipeer uses, plus static inline wrappers for what Swift cannot import
// (function-like macros). Only the Multipeer module's OpenSSL wrapper files import this.
#include <openssl/evp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>

#endif
