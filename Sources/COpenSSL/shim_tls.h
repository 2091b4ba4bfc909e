#ifndef MULTIPEER_COPENSSL_SHIM_TLS_H
#define MULTIPEER_COPENSSL_SHIM_TLS_H
// Static inline wrappers for OpenSSL TLS macros used by Sources/Multipeer/Secure.
//
// Each wrapper stands for one function-like macro (or a constant built from one, such as SSL_OP_BIT), which
// Swift cannot import. They do nothing beyond the macro.
#include <openssl/bio.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdint.h>

// SSL_CTX_set_min_proto_version and SSL_CTX_set_max_proto_version: 1 on success, 0 on failure.
static inline int multipeer_ssl_ctx_set_proto_versions(SSL_CTX *ctx, int minimum, int maximum) {
    return SSL_CTX_set_min_proto_version(ctx, minimum) == 1 && SSL_CTX_set_max_proto_version(ctx, maximum) == 1;
}

// SSL_CTX_set_mode: adds the SSL_MODE_* bits in `mode`; returns the new mode bits.
static inline long multipeer_ssl_ctx_set_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_mode(ctx, mode);
}

// SSL_CTX_set_session_cache_mode: returns the previous mode.
static inline long multipeer_ssl_ctx_set_session_cache_mode(SSL_CTX *ctx, long mode) {
    return SSL_CTX_set_session_cache_mode(ctx, mode);
}

// SSL_CTX_set1_groups_list: the key exchange groups in preference order, e.g. "X25519:P-256"; 1 on success.
static inline int multipeer_ssl_ctx_set1_groups_list(SSL_CTX *ctx, const char *list) {
    return (int)SSL_CTX_set1_groups_list(ctx, list);
}

// SSL_CTX_set1_sigalgs_list: the signature algorithms this side accepts from the peer; 1 on success.
static inline int multipeer_ssl_ctx_set1_sigalgs_list(SSL_CTX *ctx, const char *list) {
    return (int)SSL_CTX_set1_sigalgs_list(ctx, list);
}

// SSL_CTX_set1_client_sigalgs_list: the signature algorithms a server accepts in the client's
// CertificateVerify (sent in its CertificateRequest); 1 on success.
static inline int multipeer_ssl_ctx_set1_client_sigalgs_list(SSL_CTX *ctx, const char *list) {
    return (int)SSL_CTX_set1_client_sigalgs_list(ctx, list);
}

// SSL_CTX_add1_chain_cert: adds a certificate after the leaf in the chain this side presents; 1 on success.
static inline int multipeer_ssl_ctx_add1_chain_cert(SSL_CTX *ctx, X509 *certificate) {
    return (int)SSL_CTX_add1_chain_cert(ctx, certificate);
}

// The SSL_OP_* option bits the TLS layer sets or clears (they are built with the SSL_OP_BIT macro).
static inline uint64_t multipeer_ssl_op_no_compression(void) { return SSL_OP_NO_COMPRESSION; }
static inline uint64_t multipeer_ssl_op_no_renegotiation(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline uint64_t multipeer_ssl_op_no_ticket(void) { return SSL_OP_NO_TICKET; }
static inline uint64_t multipeer_ssl_op_cipher_server_preference(void) { return SSL_OP_CIPHER_SERVER_PREFERENCE; }
static inline uint64_t multipeer_ssl_op_enable_middlebox_compat(void) { return SSL_OP_ENABLE_MIDDLEBOX_COMPAT; }

// SSL_get_ex_new_index: a new index for SSL_set_ex_data, with no callbacks; -1 on failure.
static inline int multipeer_ssl_get_ex_new_index(void) {
    return SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

// sk_X509_num: the number of certificates in a stack, or -1 for NULL.
static inline int multipeer_sk_x509_num(const STACK_OF(X509) *stack) {
    return sk_X509_num(stack);
}

// BIO_set_retry_read: tells the caller of a BIO read that no data is there yet, but may be later.
static inline void multipeer_bio_set_retry_read(BIO *bio) {
    BIO_set_retry_read(bio);
}

// BIO_clear_retry_flags: clears the retry flags left by an earlier read or write.
static inline void multipeer_bio_clear_retry_flags(BIO *bio) {
    BIO_clear_retry_flags(bio);
}
#endif
