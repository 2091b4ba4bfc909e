#ifndef MULTIPEER_COPENSSL_SHIM_AEAD_H
#define MULTIPEER_COPENSSL_SHIM_AEAD_H
// Static inline wrappers for OpenSSL EVP AEAD macros used by Sources/Multipeer/Datagram.
//
// The EVP_CTRL_GCM_* names are macros defined as other macros, and EVP_CIPHER_CTX_ctrl takes the tag through a
// non-const void pointer; functions with exact C types keep the Swift side free of casts and guesses.
#include <openssl/evp.h>

// Sets the GCM nonce length (12 bytes for the datagram AEAD); call after choosing the cipher, before the nonce.
static inline int multipeer_aead_set_iv_length(EVP_CIPHER_CTX *context, int length) {
    return EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_IVLEN, length, NULL);
}

// Copies the tag of the message just encrypted (after EVP_EncryptFinal_ex) into `tag`.
static inline int multipeer_aead_get_tag(EVP_CIPHER_CTX *context, unsigned char *tag, int length) {
    return EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, length, tag);
}

// Sets the tag the message being decrypted must carry (before EVP_DecryptFinal_ex); OpenSSL copies it.
static inline int multipeer_aead_set_tag(EVP_CIPHER_CTX *context, const unsigned char *tag, int length) {
    return EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, length, (void *)tag);
}

#endif
