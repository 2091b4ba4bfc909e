#ifndef MULTIPEER_COPENSSL_SHIM_H
#define MULTIPEER_COPENSSL_SHIM_H

// The OpenSSL 3 headers swift-multipeer uses, plus static inline wrappers for what Swift cannot import
// (function-like macros, variadic functions). Only the Multipeer module's OpenSSL wrapper files import this.
#include <openssl/evp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>

// EVP_PKEY_Q_keygen is variadic, which Swift cannot call; for Ed25519 it takes no extra arguments.
static inline EVP_PKEY *multipeer_ed25519_keygen(void) {
    return EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
}

// EVP_PKEY_ED25519 is a macro defined as another macro (NID_ED25519); a function keeps the import certain.
static inline int multipeer_evp_pkey_ed25519(void) {
    return EVP_PKEY_ED25519;
}

// Wrappers for the TLS layer (Sources/Multipeer/Secure).
#include "shim_tls.h"
// Wrappers for the datagram AEAD (Sources/Multipeer/Datagram).
#include "shim_aead.h"

#endif
