/* ort_abi.h - the part of ONNX Runtime's C ABI that libselscan_ort uses, declared here so that the
 * library builds with a C++ compiler alone (the onnxruntime wheel ships no headers).
 *
 * ONNX Runtime's C API is a table of function pointers (OrtApi) that only ever grows: an entry keeps
 * its index in every later release, and OrtGetApiBase()->GetApi(v) hands out the table of API
 * version v. So a custom-op library needs only the indices and signatures of the entries it calls,
 * the OrtCustomOp struct it fills in and a few enums. Those are written below from ONNX Runtime's
 * public header onnxruntime_c_api.h (MIT License, Copyright (c) Microsoft Corporation); every entry
 * named here exists since API version 17 (ONNX Runtime 1.17), the version the library asks for.
 * The tests call every entry (bindings/torch/tests/test_onnx.py): a wrong index would not pass.
 */
#ifndef SELSCAN_ORT_ABI_H
#define SELSCAN_ORT_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SELSCAN_ORT_API_VERSION 17u /* GetApi(17): ONNX Runtime >= 1.17 (KernelContext_ParallelFor) */

#ifdef _WIN32
#define SELSCAN_ORT_CALL __stdcall
#define SELSCAN_ORT_EXPORT __declspec(dllexport)
#else
#define SELSCAN_ORT_CALL
#define SELSCAN_ORT_EXPORT __attribute__((visibility("default")))
#endif

/* opaque ONNX Runtime objects */
typedef struct OrtStatus OrtStatus;
typedef struct OrtValue OrtValue;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtShapeInferContext OrtShapeInferContext;
typedef struct OrtApi OrtApi; /* the table: read through selscan_ort_fn() */

typedef enum ONNXTensorElementDataType {
    ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED = 0,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT = 1,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32 = 6,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 = 7,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 = 10,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE = 11,
    ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 = 16
} ONNXTensorElementDataType;

typedef enum OrtErrorCode {
    ORT_OK = 0,
    ORT_FAIL = 1,
    ORT_INVALID_ARGUMENT = 2,
    ORT_RUNTIME_EXCEPTION = 6,
    ORT_NOT_IMPLEMENTED = 9
} OrtErrorCode;

typedef enum OrtMemType { OrtMemTypeDefault = 0 } OrtMemType;

typedef enum OrtCustomOpInputOutputCharacteristic {
    INPUT_OUTPUT_REQUIRED = 0,
    INPUT_OUTPUT_OPTIONAL = 1,
    INPUT_OUTPUT_VARIADIC = 2
} OrtCustomOpInputOutputCharacteristic;

typedef struct OrtApiBase {
    const OrtApi *(SELSCAN_ORT_CALL *GetApi)(uint32_t version); /* NULL when the runtime is older */
    const char *(SELSCAN_ORT_CALL *GetVersionString)(void);
} OrtApiBase;

/* A custom operator: filled in by the library, read by ONNX Runtime up to the fields of `version`. */
typedef struct OrtCustomOp OrtCustomOp;
struct OrtCustomOp {
    uint32_t version;
    void *(SELSCAN_ORT_CALL *CreateKernel)(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info);
    const char *(SELSCAN_ORT_CALL *GetName)(const OrtCustomOp *op);
    const char *(SELSCAN_ORT_CALL *GetExecutionProviderType)(const OrtCustomOp *op);
    ONNXTensorElementDataType(SELSCAN_ORT_CALL *GetInputType)(const OrtCustomOp *op, size_t index);
    size_t(SELSCAN_ORT_CALL *GetInputTypeCount)(const OrtCustomOp *op);
    ONNXTensorElementDataType(SELSCAN_ORT_CALL *GetOutputType)(const OrtCustomOp *op, size_t index);
    size_t(SELSCAN_ORT_CALL *GetOutputTypeCount)(const OrtCustomOp *op);
    void(SELSCAN_ORT_CALL *KernelCompute)(void *op_kernel, OrtKernelContext *context);
    void(SELSCAN_ORT_CALL *KernelDestroy)(void *op_kernel);
    OrtCustomOpInputOutputCharacteristic(SELSCAN_ORT_CALL *GetInputCharacteristic)(const OrtCustomOp *op, size_t index);
    OrtCustomOpInputOutputCharacteristic(SELSCAN_ORT_CALL *GetOutputCharacteristic)(const OrtCustomOp *op,
                                                                                    size_t index);
    OrtMemType(SELSCAN_ORT_CALL *GetInputMemoryType)(const OrtCustomOp *op, size_t index);
    int(SELSCAN_ORT_CALL *GetVariadicInputMinArity)(const OrtCustomOp *op);
    int(SELSCAN_ORT_CALL *GetVariadicInputHomogeneity)(const OrtCustomOp *op);
    int(SELSCAN_ORT_CALL *GetVariadicOutputMinArity)(const OrtCustomOp *op);
    int(SELSCAN_ORT_CALL *GetVariadicOutputHomogeneity)(const OrtCustomOp *op);
    OrtStatus *(SELSCAN_ORT_CALL *CreateKernelV2)(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info,
                                                  void **kernel);
    OrtStatus *(SELSCAN_ORT_CALL *KernelComputeV2)(void *op_kernel, OrtKernelContext *context);
    OrtStatus *(SELSCAN_ORT_CALL *InferOutputShapeFn)(const OrtCustomOp *op, OrtShapeInferContext *ctx);
    int(SELSCAN_ORT_CALL *GetStartVersion)(const OrtCustomOp *op);
    int(SELSCAN_ORT_CALL *GetEndVersion)(const OrtCustomOp *op);
};

/* The OrtApi entries the library calls: X(index, name, return type, parameters). */
#define SELSCAN_ORT_ENTRIES(X)                                                                                        \
    X(0, CreateStatus, OrtStatus *, (OrtErrorCode code, const char *msg))                                             \
    X(2, GetErrorMessage, const char *, (const OrtStatus *status))                                                    \
    X(26, CreateCustomOpDomain, OrtStatus *, (const char *domain, OrtCustomOpDomain **out))                           \
    X(27, CustomOpDomain_Add, OrtStatus *, (OrtCustomOpDomain * domain, const OrtCustomOp *op))                       \
    X(28, AddCustomOpDomain, OrtStatus *, (OrtSessionOptions * options, OrtCustomOpDomain * domain))                  \
    X(51, GetTensorMutableData, OrtStatus *, (OrtValue * value, void **out))                                          \
    X(60, GetTensorElementType, OrtStatus *, (const OrtTensorTypeAndShapeInfo *info, ONNXTensorElementDataType *out)) \
    X(61, GetDimensionsCount, OrtStatus *, (const OrtTensorTypeAndShapeInfo *info, size_t *out))                      \
    X(62, GetDimensions, OrtStatus *, (const OrtTensorTypeAndShapeInfo *info, int64_t *dims, size_t n))               \
    X(65, GetTensorTypeAndShape, OrtStatus *, (const OrtValue *value, OrtTensorTypeAndShapeInfo **out))               \
    X(85, KernelInfoGetAttribute_float, OrtStatus *, (const OrtKernelInfo *info, const char *name, float *out))       \
    X(86, KernelInfoGetAttribute_int64, OrtStatus *, (const OrtKernelInfo *info, const char *name, int64_t *out))     \
    X(87, KernelInfoGetAttribute_string, OrtStatus *,                                                                 \
      (const OrtKernelInfo *info, const char *name, char *out, size_t *size))                                         \
    X(88, KernelContext_GetInputCount, OrtStatus *, (const OrtKernelContext *ctx, size_t *out))                       \
    X(89, KernelContext_GetOutputCount, OrtStatus *, (const OrtKernelContext *ctx, size_t *out))                      \
    X(90, KernelContext_GetInput, OrtStatus *, (const OrtKernelContext *ctx, size_t index, const OrtValue **out))     \
    X(91, KernelContext_GetOutput, OrtStatus *,                                                                       \
      (OrtKernelContext * ctx, size_t index, const int64_t *dims, size_t n, OrtValue **out))                          \
    X(93, ReleaseStatus, void, (OrtStatus * status))                                                                  \
    X(99, ReleaseTensorTypeAndShapeInfo, void, (OrtTensorTypeAndShapeInfo * info))                                    \
    X(274, KernelContext_ParallelFor, OrtStatus *,                                                                    \
      (const OrtKernelContext *ctx, void (*fn)(void *, size_t), size_t total, size_t num_batch, void *user))

#ifdef __cplusplus
}
#endif
#endif /* SELSCAN_ORT_ABI_H */
